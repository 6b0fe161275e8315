-- expect: NotSupportedError WHERE
SELECT COUNT(*) FROM adult WHERE age > (SELECT AVG(age) FROM adult)
