SELECT sex, race, job, GROUPING(sex, race, job) AS level, COUNT(*) FROM adult WHERE age >= 30 GROUP BY ROLLUP (sex, race, job)
