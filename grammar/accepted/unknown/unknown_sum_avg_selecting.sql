SELECT browser, COUNT(*), SUM(age), AVG(age) FROM adult GROUP BY browser
