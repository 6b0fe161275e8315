-- expect: ProgrammingError does not run
SELECT sex + 1 FROM (SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex) AS c
