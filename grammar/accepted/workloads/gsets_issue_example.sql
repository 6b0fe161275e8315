SELECT job, sex, COUNT(*) FROM adult GROUP BY GROUPING SETS ((job), (job, sex), ())
