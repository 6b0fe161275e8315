SELECT sex, COUNT(*) FROM adult WHERE age > 20 AND age <= 65 GROUP BY ROLLUP (sex)
