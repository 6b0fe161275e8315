SELECT sex, race, job, COUNT(*) FROM adult WHERE age >= 18 GROUP BY sex, race, job
