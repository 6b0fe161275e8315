SELECT sex, COUNT(person_id) AS with_unit, COUNT(*) AS n FROM adult GROUP BY sex
