SELECT sex, job, COUNT(*), MEDIAN(age), MIN(age), MAX(age) FROM adult GROUP BY CUBE (sex, job)
