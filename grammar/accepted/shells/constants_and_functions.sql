SELECT 3 AS three, PI() AS pi, COUNT(*) AS n, ROUND(AVG(age), 1) AS mean_age, UPPER('all') AS label FROM adult
