-- expect: NotSupportedError subquery reads a private table
SELECT COUNT(*) FROM adult WHERE race IN (SELECT race FROM adult)
