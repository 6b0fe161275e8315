SELECT race, COUNT(income) FILTER (WHERE sex = 'F') AS earning_women, SUM(income) FILTER (WHERE age BETWEEN 30 AND 50 OR job IS NULL) AS income_30_50 FROM adult GROUP BY race
