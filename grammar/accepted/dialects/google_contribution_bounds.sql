-- duckdb: SELECT race, AVG(age) AS mean_age, COUNT(*) AS n FROM adult GROUP BY race
SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(privacy_unit_column = person_id)
  race, AVG(age, contribution_bounds_per_group => (17, 90)) mean_age, COUNT(*, contribution_bounds_per_group => (0, 3)) n
FROM adult GROUP BY race
