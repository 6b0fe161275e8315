SELECT p.age, COUNT(DISTINCT v.person_id) AS people FROM visits v JOIN persons p ON v.person_id = p.id GROUP BY p.age
