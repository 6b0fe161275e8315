-- expect: NotSupportedError SUM
SELECT sex, SUM(age + race) FROM adult GROUP BY sex
