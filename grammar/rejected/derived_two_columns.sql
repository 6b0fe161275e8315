-- expect: NotSupportedError GROUP BY
SELECT age + race AS x, COUNT(*) FROM adult GROUP BY x
