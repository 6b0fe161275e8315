-- expect: NotSupportedError DISTINCT
SELECT DISTINCT sex, COUNT(*) FROM adult GROUP BY sex
