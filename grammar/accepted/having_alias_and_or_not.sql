SELECT job, COUNT(*) AS n FROM adult GROUP BY job HAVING (n > 300.5 AND NOT COUNT(job) < 0.5) OR n < -1 ORDER BY COUNT(job)
