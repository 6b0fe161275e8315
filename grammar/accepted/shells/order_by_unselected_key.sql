SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex, race ORDER BY race, sex
