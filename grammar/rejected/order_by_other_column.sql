-- expect: NotSupportedError ORDER BY
SELECT sex, COUNT(*) FROM adult GROUP BY sex, race ORDER BY race
