-- expect: NotSupportedError joined to the public table 'clinics'
SELECT COUNT(*) FROM visits v JOIN clinics c ON v.clinic_id = c.id JOIN labs l ON l.person_id = c.id
