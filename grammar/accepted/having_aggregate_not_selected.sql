SELECT race, COUNT(*) FROM adult WHERE sex = 'F' GROUP BY race HAVING COUNT(age) > 5
