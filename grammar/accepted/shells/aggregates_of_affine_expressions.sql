SELECT sex, SUM(age + 1) AS s, AVG(age / 10) AS a, STDDEV(2 * age - 3) AS sd, VARIANCE(-age) AS v, MEDIAN(-age) AS m,
  MAX(100 - age) AS mx, QUANTILE_CONT(age * 2, 0.25) AS q, COUNT(age + 1) AS n
FROM adult GROUP BY sex
