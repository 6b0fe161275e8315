-- expect: NotSupportedError COUNT(DISTINCT
SELECT COUNT(DISTINCT person_id) FROM adult
