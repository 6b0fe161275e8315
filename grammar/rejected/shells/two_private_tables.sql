-- expect: ProgrammingError unknown table
SELECT (SELECT COUNT(*) FROM adult) AS a, (SELECT COUNT(*) FROM census) AS b
