SELECT COUNT(*) FROM adult WHERE (sex = 'F' AND race = 1) OR (sex = 'M' AND age BETWEEN 17 AND 20)
