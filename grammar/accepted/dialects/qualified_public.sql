-- duckdb: SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex
SELECT sex, COUNT(*) AS n FROM public.adult GROUP BY sex
