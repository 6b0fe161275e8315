SELECT sex, COUNT(*) FROM adult WHERE age > 100 GROUP BY sex
