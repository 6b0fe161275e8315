SELECT v.kind, COUNT(*) AS n FROM visits v LEFT JOIN clinics c ON v.clinic_id = c.id WHERE c.region = 'north' OR v.cost > 30 GROUP BY v.kind
