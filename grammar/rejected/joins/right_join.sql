-- expect: NotSupportedError RIGHT JOIN clinics is not supported
SELECT COUNT(*) FROM visits v RIGHT JOIN clinics c ON v.clinic_id = c.id
