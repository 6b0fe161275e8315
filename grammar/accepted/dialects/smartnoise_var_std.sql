-- duckdb: SELECT sex, VARIANCE(age) AS v, STDDEV(age) AS s, COUNT(*) AS n FROM adult GROUP BY sex
SELECT sex, VAR(age) AS v, STD(age) AS s, COUNT(*) AS n FROM adult GROUP BY sex
