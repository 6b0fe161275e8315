-- expect: NotSupportedError GROUP BY
SELECT CASE WHEN age < 30 THEN 'young' ELSE 1 END AS x, COUNT(*) FROM adult GROUP BY x
