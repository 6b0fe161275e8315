SELECT age // 10 AS d, sex, GROUPING(age // 10) AS g, COUNT(*) AS n FROM adult GROUP BY ROLLUP (d, sex) HAVING COUNT(*) > 40.5
