SELECT sex, COUNT(*) FILTER (WHERE age > 60) AS seniors, AVG(age) FILTER (WHERE race = 1) AS age_of_race_1, COUNT(*) AS n FROM adult GROUP BY sex
