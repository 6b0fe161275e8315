SELECT job, sex, GROUPING(job, sex) AS g, COUNT(*), AVG(age) AS mean_age, STDDEV_SAMP(age) FROM adult GROUP BY GROUPING SETS ((job), (job, sex), ())
