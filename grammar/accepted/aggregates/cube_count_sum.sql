SELECT sex, COUNT(*), SUM(age) FROM adult GROUP BY CUBE (sex)
