-- expect: NotSupportedError group_selection_strategy
SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(group_selection_strategy = PUBLIC_GROUPS) race, COUNT(*) FROM adult GROUP BY race
