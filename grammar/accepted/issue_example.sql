SELECT sex, race, COUNT(*) AS n FROM adult WHERE age BETWEEN 20 AND 40 GROUP BY sex, race
