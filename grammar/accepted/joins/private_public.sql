SELECT c.region, COUNT(*) AS n FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region
