-- expect: NotSupportedError LIMIT
SELECT COUNT(*) FROM adult LIMIT 1 + 1
