-- expect: NotSupportedError SUM
SELECT SUM(age) FROM adult
