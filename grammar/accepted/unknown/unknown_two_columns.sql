SELECT browser, person_id, COUNT(*) FROM adult GROUP BY browser, person_id
