SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex UNION ALL SELECT 'all', COUNT(*) FROM adult
