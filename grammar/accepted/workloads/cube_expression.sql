SELECT race + 1 AS r, COUNT(*) FROM adult GROUP BY CUBE (r)
