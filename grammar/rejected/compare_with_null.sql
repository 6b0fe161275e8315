-- expect: ProgrammingError IS NULL
SELECT COUNT(*) FROM adult WHERE job = NULL
