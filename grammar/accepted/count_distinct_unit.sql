SELECT COUNT(DISTINCT adult.person_id) AS persons FROM adult WHERE age >= 30 AND sex = 'F'
