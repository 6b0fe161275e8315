SELECT sex, SUM(CASE WHEN age > 60 THEN 1 ELSE 0 END) AS seniors, COUNT(*) AS n FROM adult GROUP BY sex
