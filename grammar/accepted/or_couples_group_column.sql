SELECT sex, COUNT(*) FROM adult WHERE sex = 'M' OR age > 60 GROUP BY sex
