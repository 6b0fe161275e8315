SELECT race, SUM(age * 2 + CASE WHEN sex = 'F' THEN 10 ELSE 0 END) AS points, STDDEV(age * 2 + CASE WHEN sex = 'F' THEN 10 ELSE 0 END) FROM adult GROUP BY race
