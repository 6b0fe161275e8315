-- expect: NotSupportedError bounds
SELECT sex, AVG(race) FROM adult GROUP BY sex
