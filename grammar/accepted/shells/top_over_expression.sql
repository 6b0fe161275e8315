-- ordered
-- duckdb: SELECT race, COUNT(*) * 1.5 AS weighted FROM adult GROUP BY race ORDER BY weighted DESC LIMIT 2
SELECT TOP 2 race, COUNT(*) * 1.5 AS weighted FROM adult GROUP BY race ORDER BY weighted DESC
