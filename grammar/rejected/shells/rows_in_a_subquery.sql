-- expect: NotSupportedError private rows
SELECT sex, COUNT(*) FROM (SELECT sex, age FROM adult WHERE age > 30) AS t GROUP BY sex
