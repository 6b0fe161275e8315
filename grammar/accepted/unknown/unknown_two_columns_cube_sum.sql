SELECT browser, person_id, SUM(age) FROM adult GROUP BY CUBE (browser, person_id)
