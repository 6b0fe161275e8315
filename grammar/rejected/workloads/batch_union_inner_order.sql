-- expect: NotSupportedError ORDER BY
SELECT sex, COUNT(*) FROM adult GROUP BY sex ORDER BY sex UNION ALL SELECT sex, COUNT(*) FROM adult GROUP BY sex
