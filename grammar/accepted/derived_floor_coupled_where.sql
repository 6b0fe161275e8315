SELECT floor(age / 10) AS d, sex, COUNT(job) FROM adult WHERE age >= 30 OR sex = 'F' GROUP BY d, sex
