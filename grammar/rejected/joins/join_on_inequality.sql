-- expect: NotSupportedError a join condition equates declared keys
SELECT COUNT(*) FROM visits v JOIN clinics c ON v.clinic_id > c.id
