-- duckdb: SELECT race, COUNT(*) AS n FROM adult GROUP BY race ORDER BY n DESC LIMIT 3
SELECT TOP 3 race, COUNT(*) AS n FROM adult GROUP BY race ORDER BY n DESC
