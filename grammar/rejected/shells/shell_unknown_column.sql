-- expect: ProgrammingError does not run
SELECT colour FROM (SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex) AS c
