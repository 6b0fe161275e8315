SELECT p.age, COUNT(*) AS n FROM persons p LEFT JOIN labs l ON l.person_id = p.id WHERE p.sex = 'F' GROUP BY p.age
