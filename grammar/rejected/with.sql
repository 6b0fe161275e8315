-- expect: NotSupportedError private rows
WITH t AS (SELECT * FROM adult) SELECT COUNT(*) FROM t
