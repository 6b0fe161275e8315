SELECT sex, COUNT(job) AS with_job, COUNT(*) AS everyone FROM adult GROUP BY sex
