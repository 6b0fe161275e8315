-- expect: ProgrammingError GROUP BY
SELECT sex, race, COUNT(*) FROM adult GROUP BY GROUPING SETS ((sex), ())
