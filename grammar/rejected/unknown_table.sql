-- expect: ProgrammingError FROM
SELECT COUNT(*) FROM census
