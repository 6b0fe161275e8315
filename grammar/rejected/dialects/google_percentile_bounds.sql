-- expect: NotSupportedError contribution_bounds_per_row is not supported on quantiles
SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(privacy_unit_column = person_id)
  sex, PERCENTILE_CONT(age, 0.5, contribution_bounds_per_row => (17, 90)) median_age
FROM adult GROUP BY sex
