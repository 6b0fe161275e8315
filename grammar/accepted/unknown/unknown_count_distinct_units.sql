SELECT browser, COUNT(DISTINCT person_id) FROM adult GROUP BY browser
