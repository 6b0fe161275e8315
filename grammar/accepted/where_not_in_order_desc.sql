SELECT race, COUNT(*) n FROM adult WHERE race NOT IN (0) AND age >= 30 GROUP BY race ORDER BY n DESC
