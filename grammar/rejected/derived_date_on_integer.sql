-- expect: NotSupportedError GROUP BY
SELECT year(age) AS y, COUNT(*) FROM adult GROUP BY y
