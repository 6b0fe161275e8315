-- expect: NotSupportedError WHERE
SELECT browser, sex, COUNT(*) FROM adult WHERE browser <> 'lynx' GROUP BY ROLLUP (browser, sex)
