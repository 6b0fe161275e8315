SELECT age / 10 AS tenth, COUNT(*) FROM adult GROUP BY age / 10
