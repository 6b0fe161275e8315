-- expect: NotSupportedError GROUP BY
SELECT age // 10 AS age, COUNT(*) FROM adult GROUP BY age
