-- expect: NotSupportedError COUNT(DISTINCT person_id) with
SELECT sex, COUNT(*), COUNT(DISTINCT person_id) FROM adult GROUP BY sex
