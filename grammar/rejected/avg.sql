-- expect: NotSupportedError AVG
SELECT sex, AVG(age) FROM adult GROUP BY sex
