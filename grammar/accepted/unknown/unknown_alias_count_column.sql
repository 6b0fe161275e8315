SELECT a.browser AS b, COUNT(job) FROM adult AS a GROUP BY a.browser LIMIT 2
