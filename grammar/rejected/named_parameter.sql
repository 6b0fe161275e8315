-- expect: ProgrammingError parameters
SELECT COUNT(*) FROM adult WHERE age > :age
