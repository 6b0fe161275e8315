SELECT CASE WHEN job IS NULL THEN 'none' WHEN job IN ('nurse', 'teacher') THEN 'care' END AS kind, COUNT(*) FROM adult GROUP BY kind
