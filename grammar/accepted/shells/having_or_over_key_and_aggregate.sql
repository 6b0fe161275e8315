SELECT race, COUNT(*) AS n FROM adult GROUP BY race HAVING race = 4 OR COUNT(*) > 400
