-- expect: NotSupportedError WHERE
SELECT COUNT(*) FROM adult WHERE browser = 'firefox'
