-- duckdb: SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex
SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(privacy_unit_column = person_id) sex, COUNT(*) AS n FROM adult GROUP BY sex
