SELECT COUNT(DISTINCT person_id) AS persons, COUNT(*) AS n FROM adult
