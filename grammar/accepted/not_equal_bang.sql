SELECT race, COUNT(*) FROM adult WHERE race != 4 AND age <= 60 GROUP BY race ORDER BY COUNT(*)
