SELECT browser, COUNT(*) FROM adult GROUP BY browser UNION ALL SELECT browser, COUNT(*) FROM adult GROUP BY browser
