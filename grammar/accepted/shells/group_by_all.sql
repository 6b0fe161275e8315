SELECT sex, race, COUNT(*) AS n FROM adult GROUP BY ALL
