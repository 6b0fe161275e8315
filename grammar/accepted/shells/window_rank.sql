-- ordered
SELECT race, COUNT(*) AS n, RANK() OVER (ORDER BY COUNT(*) DESC) AS place FROM adult GROUP BY race ORDER BY race
