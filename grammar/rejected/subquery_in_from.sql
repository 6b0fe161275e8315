-- expect: NotSupportedError private rows
SELECT COUNT(*) FROM (SELECT * FROM adult) AS t
