SELECT sex, QUANTILE(age, 0.25), QUANTILE_DISC(age, 0.75) FROM adult WHERE age >= 30 AND race IN (0, 1) GROUP BY ROLLUP (sex)
