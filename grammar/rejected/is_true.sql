-- expect: NotSupportedError WHERE
SELECT COUNT(*) FROM adult WHERE sex IS TRUE
