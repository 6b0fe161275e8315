-- expect: NotSupportedError splits a bin
SELECT COUNT(*) FROM adult WHERE income BETWEEN 5000 AND 20000
