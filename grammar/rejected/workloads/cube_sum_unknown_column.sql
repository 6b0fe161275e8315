-- expect: NotSupportedError no declared domain
SELECT browser, SUM(age) FROM adult GROUP BY CUBE (browser)
