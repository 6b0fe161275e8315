SELECT sex, AVG(age), MEDIAN(age), STDDEV(age) FROM adult GROUP BY sex
