-- expect: ProgrammingError unknown table
SELECT COUNT(*) FROM sales.adult
