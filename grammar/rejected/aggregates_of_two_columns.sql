-- expect: NotSupportedError several columns
SELECT sex, SUM(age), AVG(income) FROM adult GROUP BY sex
