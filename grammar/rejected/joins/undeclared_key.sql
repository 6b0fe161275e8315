-- expect: NotSupportedError is not a declared key
SELECT c.region, COUNT(*) FROM visits v JOIN clinics c ON v.cost = c.id GROUP BY c.region
