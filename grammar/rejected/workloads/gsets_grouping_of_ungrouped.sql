-- expect: ProgrammingError GROUPING
SELECT sex, GROUPING(race) FROM adult GROUP BY CUBE (sex)
