-- expect: NotSupportedError GROUP BY
SELECT sex, COUNT(*) FROM adult GROUP BY ROLLUP (sex)
