-- expect: NotSupportedError several grouping sets
SELECT sex, race, COUNT(DISTINCT person_id) FROM adult GROUP BY CUBE (sex, race)
