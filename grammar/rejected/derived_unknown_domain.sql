-- expect: NotSupportedError GROUP BY
SELECT CASE WHEN browser = 'x' THEN 1 ELSE 0 END AS b, COUNT(*) FROM adult GROUP BY b
