-- expect: NotSupportedError WHERE
SELECT COUNT(*) FROM adult WHERE income < 20000
