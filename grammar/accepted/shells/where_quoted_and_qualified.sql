-- duckdb: SELECT race, COUNT(*) + 0 AS n FROM main.adult WHERE age > '30' GROUP BY race
SELECT race, COUNT(*) + 0 AS n FROM public.adult WHERE age > '30' GROUP BY race
