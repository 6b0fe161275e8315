-- expect: NotSupportedError WHERE
SELECT COUNT(*) FROM adult WHERE age > race
