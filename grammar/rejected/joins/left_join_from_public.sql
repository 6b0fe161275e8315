-- expect: NotSupportedError a LEFT JOIN from the public table
SELECT COUNT(*) FROM clinics c LEFT JOIN visits v ON v.clinic_id = c.id
