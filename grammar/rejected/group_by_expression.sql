-- expect: NotSupportedError GROUP BY
SELECT COUNT(*) FROM adult GROUP BY age / 10
