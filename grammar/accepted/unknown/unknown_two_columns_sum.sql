SELECT browser, person_id, SUM(age) FROM adult GROUP BY browser, person_id
