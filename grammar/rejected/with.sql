-- expect: NotSupportedError WITH
WITH t AS (SELECT * FROM adult) SELECT COUNT(*) FROM t
