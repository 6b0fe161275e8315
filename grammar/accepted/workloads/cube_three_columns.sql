SELECT sex, race, job, COUNT(*) FROM adult GROUP BY CUBE (sex, race, job)
