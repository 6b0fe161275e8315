-- expect: NotSupportedError join ON p.id = v.person_id
SELECT COUNT(*) FROM visits v JOIN persons p ON v.clinic_id = p.id
