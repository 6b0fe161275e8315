-- expect: ProgrammingError is not the table
SELECT other.adult.sex, COUNT(*) FROM main.adult GROUP BY sex
