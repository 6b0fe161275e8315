-- ordered
WITH by_race AS (SELECT race, COUNT(*) AS n FROM adult GROUP BY race)
SELECT race, n, n * 100.0 / SUM(n) OVER () AS percent FROM by_race WHERE n > 100 ORDER BY race
