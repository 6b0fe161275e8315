-- duckdb: SELECT race, COUNT(*) AS n FROM adult WHERE race IN (1, 2) AND age >= 30 GROUP BY race
SELECT race, COUNT(*) AS n FROM adult WHERE race IN ('1', '2') AND age >= '30' GROUP BY race
