SELECT sex, COUNT(*) AS n, STDDEV(age) AS sd, VARIANCE(age) AS var, VAR_POP(age), STDDEV_POP(age) FROM adult GROUP BY sex
