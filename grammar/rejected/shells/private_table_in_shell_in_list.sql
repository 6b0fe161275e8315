-- expect: NotSupportedError private rows
SELECT race, COUNT(*) AS n FROM adult GROUP BY race HAVING race IN (SELECT race FROM adult)
