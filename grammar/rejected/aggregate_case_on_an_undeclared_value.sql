-- expect: ProgrammingError declared values
SELECT SUM(CASE WHEN sex = 'X' THEN age ELSE 0 END) FROM adult
