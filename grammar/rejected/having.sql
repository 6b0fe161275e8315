-- expect: NotSupportedError HAVING
SELECT sex, COUNT(*) FROM adult GROUP BY sex HAVING COUNT(*) > 10
