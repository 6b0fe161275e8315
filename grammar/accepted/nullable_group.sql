SELECT job, COUNT(*) AS n FROM adult GROUP BY job
