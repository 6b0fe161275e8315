-- expect: NotSupportedError is not supported there
SELECT sex, SUM(SQRT(age)) FROM adult GROUP BY sex
