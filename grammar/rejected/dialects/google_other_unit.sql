-- expect: NotSupportedError privacy_unit_column
SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(privacy_unit_column = sex) race, COUNT(*) FROM adult GROUP BY race
