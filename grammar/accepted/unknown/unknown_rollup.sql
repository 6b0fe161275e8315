SELECT browser, COUNT(*) FROM adult GROUP BY ROLLUP (browser)
