SELECT c.region, COUNT(*) AS n FROM clinics c JOIN visits v ON v.clinic_id = c.id WHERE v.kind = 'a' GROUP BY c.region
