SELECT sex, race, GROUPING(sex, race) AS level, COUNT(*) * 2 AS doubled FROM adult GROUP BY ROLLUP (sex, race) HAVING GROUPING(sex, race) < 3 OR COUNT(*) > 0
