SELECT browser, sex, COUNT(*) AS n FROM adult WHERE age >= 30 GROUP BY browser, sex ORDER BY n DESC
