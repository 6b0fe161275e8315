-- expect: NotSupportedError SUM
SELECT sex, SUM(age + 1) FROM adult GROUP BY sex
