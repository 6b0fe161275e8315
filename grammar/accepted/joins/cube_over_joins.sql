SELECT c.region, p.sex, COUNT(*) AS n FROM visits v JOIN persons p ON v.person_id = p.id JOIN clinics c ON v.clinic_id = c.id GROUP BY CUBE (c.region, p.sex)
