SELECT race, AVG(CASE WHEN sex = 'M' THEN age END) AS male_age, SUM(age > 60) AS seniors FROM adult GROUP BY race
