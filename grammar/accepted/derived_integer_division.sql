SELECT age // 10 AS decade, COUNT(*) AS n FROM adult GROUP BY decade
