-- expect: ProgrammingError GROUP BY
SELECT sex, COUNT(*) FROM adult GROUP BY 2
