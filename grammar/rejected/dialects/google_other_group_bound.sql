-- expect: NotSupportedError max_groups_contributed
SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(max_groups_contributed = 5) race, COUNT(*) FROM adult GROUP BY race
