SELECT race, COUNT(*) AS n FROM adult WHERE race IN (1, 2, 3) GROUP BY race
