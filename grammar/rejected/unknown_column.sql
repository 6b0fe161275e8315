-- expect: ProgrammingError WHERE
SELECT COUNT(*) FROM adult WHERE height > 180
