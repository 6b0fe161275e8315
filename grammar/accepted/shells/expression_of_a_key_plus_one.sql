SELECT age + 1, COUNT(*) FROM adult GROUP BY age
