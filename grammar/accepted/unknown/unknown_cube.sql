SELECT browser, sex, COUNT(*) FROM adult GROUP BY CUBE (browser, sex)
