-- expect: NotSupportedError GROUP BY
SELECT COUNT(*) FROM adult GROUP BY CUBE (race + age)
