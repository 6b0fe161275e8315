-- expect: NotSupportedError SUM(DISTINCT
SELECT sex, SUM(DISTINCT age) FROM adult GROUP BY sex
