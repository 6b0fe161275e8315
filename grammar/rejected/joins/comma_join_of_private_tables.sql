-- expect: NotSupportedError CROSS JOIN
SELECT COUNT(*) FROM visits v, persons p
