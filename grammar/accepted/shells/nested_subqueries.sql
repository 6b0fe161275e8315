SELECT race, n FROM (SELECT race, COUNT(*) AS n FROM adult GROUP BY race) AS t
WHERE n > (SELECT AVG(m) FROM (SELECT sex, COUNT(*) AS m FROM adult GROUP BY sex) AS u) / 5
