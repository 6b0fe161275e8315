SELECT p.sex, c.region, COUNT(*) AS n FROM visits v JOIN persons p ON p.id = v.person_id JOIN clinics c ON v.clinic_id = c.id GROUP BY p.sex, c.region
