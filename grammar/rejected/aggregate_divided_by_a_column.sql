-- expect: NotSupportedError division by
SELECT SUM(age / race) FROM adult
