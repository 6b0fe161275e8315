SELECT COUNT(*) AS n, SUM(cost) AS s FROM visits WHERE clinic_id IN (SELECT id FROM clinics WHERE region = 'north')
