SELECT sex, MEDIAN(age) FROM adult GROUP BY sex
