-- expect: NotSupportedError WHERE
SELECT browser, COUNT(*) FROM adult WHERE browser = 'safari' GROUP BY browser
