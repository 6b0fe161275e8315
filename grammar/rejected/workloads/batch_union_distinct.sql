-- expect: NotSupportedError UNION
SELECT sex, COUNT(*) FROM adult GROUP BY CUBE (sex) UNION SELECT sex, COUNT(*) FROM adult GROUP BY sex
