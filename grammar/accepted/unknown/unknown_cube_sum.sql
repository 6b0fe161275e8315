SELECT browser, SUM(age) FROM adult GROUP BY CUBE (browser)
