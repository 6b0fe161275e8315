-- expect: NotSupportedError GROUP BY
SELECT lower(sex) AS s, COUNT(*) FROM adult GROUP BY s
