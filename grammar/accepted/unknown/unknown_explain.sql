EXPLAIN SELECT browser, COUNT(*) FROM adult GROUP BY browser
