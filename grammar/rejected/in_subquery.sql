-- expect: NotSupportedError WHERE
SELECT COUNT(*) FROM adult WHERE race IN (SELECT race FROM adult)
