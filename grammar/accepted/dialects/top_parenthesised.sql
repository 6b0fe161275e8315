-- duckdb: SELECT sex, race, COUNT(*) AS n FROM adult GROUP BY sex, race ORDER BY sex, race LIMIT 4
SELECT TOP (4) sex, race, COUNT(*) AS n FROM adult GROUP BY sex, race ORDER BY sex, race
