SELECT sex, race, SUM(age), AVG(age) FROM adult GROUP BY CUBE (sex, race)
