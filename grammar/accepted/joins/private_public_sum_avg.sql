SELECT c.region, COUNT(*) AS n, SUM(v.cost) AS s, AVG(v.cost) AS a FROM visits AS v JOIN clinics AS c ON v.clinic_id = c.id GROUP BY c.region
