SELECT sex, race, COUNT(DISTINCT adult.person_id) AS persons FROM adult WHERE age >= 30 GROUP BY sex, race HAVING persons > 10
