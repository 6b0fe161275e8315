SELECT r.zone, v.kind, COUNT(*) AS n FROM visits v JOIN clinics c ON v.clinic_id = c.id JOIN regions r ON c.region = r.region GROUP BY r.zone, v.kind
