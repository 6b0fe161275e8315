SELECT browser, person_id, sex, COUNT(*) FROM adult GROUP BY GROUPING SETS ((browser, person_id, sex), (sex), ())
