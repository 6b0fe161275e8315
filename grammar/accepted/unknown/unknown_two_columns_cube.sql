SELECT browser, person_id, COUNT(*) FROM adult GROUP BY CUBE (browser, person_id)
