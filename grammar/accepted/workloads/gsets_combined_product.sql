SELECT sex, race, job, COUNT(*) FROM adult GROUP BY sex, CUBE (race), ROLLUP (job)
