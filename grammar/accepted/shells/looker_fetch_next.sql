-- ordered
-- duckdb: SELECT adult.race AS adult_race, COUNT(*) AS adult_count FROM main.adult AS adult GROUP BY 1 ORDER BY 2 DESC FETCH NEXT 500 ROWS ONLY
SELECT adult.race AS adult_race, COUNT(*) AS adult_count FROM public.adult AS adult GROUP BY 1 ORDER BY 2 DESC FETCH NEXT 500 ROWS ONLY
