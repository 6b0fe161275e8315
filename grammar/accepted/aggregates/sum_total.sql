SELECT SUM(age) FROM adult
