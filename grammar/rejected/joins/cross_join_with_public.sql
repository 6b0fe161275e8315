-- expect: NotSupportedError of a private table with clinics
SELECT COUNT(*) FROM visits v CROSS JOIN clinics c
