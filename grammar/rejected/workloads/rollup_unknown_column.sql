-- expect: ProgrammingError unknown column
SELECT sex, COUNT(*) FROM adult GROUP BY ROLLUP (sex, colour)
