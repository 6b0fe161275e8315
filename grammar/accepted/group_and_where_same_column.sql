SELECT age, COUNT(*) AS n FROM adult WHERE age < 25 GROUP BY age
