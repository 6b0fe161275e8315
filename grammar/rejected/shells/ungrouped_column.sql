-- expect: ProgrammingError must appear in the GROUP BY clause
SELECT sex, age, COUNT(*) * 2 FROM adult GROUP BY sex
