-- expect: NotSupportedError UNION
SELECT COUNT(*) FROM adult UNION SELECT COUNT(*) FROM adult
