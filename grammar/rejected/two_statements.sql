-- expect: ProgrammingError statement
SELECT COUNT(*) FROM adult; SELECT COUNT(*) FROM adult
