-- expect: NotSupportedError CROSS JOIN
SELECT COUNT(*) FROM visits v CROSS JOIN persons p
