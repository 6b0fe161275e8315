-- expect: NotSupportedError must go through the privacy unit
SELECT COUNT(*) FROM visits v JOIN labs l ON v.person_id = l.value
