SELECT job, MEDIAN(age) AS m FROM adult WHERE job IS NOT NULL OR sex = 'F' GROUP BY job
