-- expect: NotSupportedError GROUP BY
SELECT age / 2.5 AS x, COUNT(*) FROM adult GROUP BY x
