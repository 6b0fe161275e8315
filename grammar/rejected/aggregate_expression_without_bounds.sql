-- expect: NotSupportedError has no bounds
SELECT SUM(age + browser) FROM adult
