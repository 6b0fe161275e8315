SELECT race, sex, COUNT(1) FROM adult WHERE 40 > age GROUP BY sex, race ORDER BY 3 DESC, 1, 2 LIMIT 5
