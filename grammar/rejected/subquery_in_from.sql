-- expect: NotSupportedError FROM
SELECT COUNT(*) FROM (SELECT * FROM adult) AS t
