-- expect: NotSupportedError WHERE
SELECT COUNT(*) FROM adult WHERE job LIKE 'c%'
