-- expect: NotSupportedError the subquery reads a private table
SELECT COUNT(*) FROM visits WHERE person_id IN (SELECT person_id FROM labs)
