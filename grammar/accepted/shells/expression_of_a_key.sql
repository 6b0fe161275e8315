SELECT age // 10, COUNT(*) FROM adult GROUP BY age
