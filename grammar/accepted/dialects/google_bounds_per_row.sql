-- duckdb: SELECT sex, VAR_POP(LEAST(GREATEST(age, 20), 60)) AS v, SUM(LEAST(GREATEST(age, 20), 60)) AS s FROM adult GROUP BY sex
SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(privacy_unit_column = person_id)
  sex, VAR_POP(age, contribution_bounds_per_row => (20, 60)) v, SUM(age, contribution_bounds_per_row => (20, 60)) s
FROM adult GROUP BY sex
