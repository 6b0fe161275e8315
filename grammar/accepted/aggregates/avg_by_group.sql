SELECT sex, AVG(age) FROM adult GROUP BY sex
