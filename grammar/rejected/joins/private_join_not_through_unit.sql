-- expect: NotSupportedError must go through the privacy unit
SELECT COUNT(*) FROM visits v JOIN labs l ON v.clinic_id = l.value
