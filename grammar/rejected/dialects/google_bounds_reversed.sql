-- expect: ProgrammingError contribution_bounds_per_group
SELECT race, SUM(age, contribution_bounds_per_group => (90, 17)) FROM adult GROUP BY race
