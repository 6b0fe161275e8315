SELECT p.age, COUNT(*) AS n, SUM(v.cost) AS s FROM visits v JOIN persons p ON v.person_id = p.id GROUP BY p.age
