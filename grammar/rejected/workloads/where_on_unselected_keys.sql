-- expect: NotSupportedError no declared domain
SELECT browser, sex, COUNT(*) FROM adult WHERE browser = 'firefox' GROUP BY CUBE (browser, sex)
