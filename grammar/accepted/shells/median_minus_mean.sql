SELECT sex, MEDIAN(age) - AVG(age) AS skew FROM adult GROUP BY sex
