-- expect: NotSupportedError COUNT(DISTINCT age)
SELECT sex, COUNT(DISTINCT age) FROM adult GROUP BY sex
