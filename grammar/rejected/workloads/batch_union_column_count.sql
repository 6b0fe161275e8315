-- expect: ProgrammingError UNION ALL
SELECT sex, COUNT(*) FROM adult GROUP BY sex UNION ALL SELECT COUNT(*) FROM adult
