-- expect: NotSupportedError bounds
SELECT sex, AVG(income) FROM adult GROUP BY sex
