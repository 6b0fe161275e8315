-- expect: ProgrammingError unknown table
SELECT COUNT(*) FROM somewhere_else
