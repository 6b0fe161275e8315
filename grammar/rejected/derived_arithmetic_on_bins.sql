-- expect: NotSupportedError GROUP BY
SELECT income // 10 AS x, COUNT(*) FROM adult GROUP BY x
