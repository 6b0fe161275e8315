-- expect: NotSupportedError without a declared domain
SELECT browser, sex, COUNT(DISTINCT person_id) FROM adult GROUP BY browser, sex
