-- duckdb: SELECT a.race, COUNT(*) AS n FROM main.adult AS a GROUP BY a.race
SELECT a.race, COUNT(*) AS n FROM memory.main.adult AS a GROUP BY a.race
