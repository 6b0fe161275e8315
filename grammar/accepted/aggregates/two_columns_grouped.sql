SELECT sex, AVG(age), SUM(income) FROM adult GROUP BY sex
