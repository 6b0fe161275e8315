SELECT sex, COUNT(*) FROM adult GROUP BY sex HAVING sex = 'F'
