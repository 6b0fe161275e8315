-- expect: NotSupportedError USING SAMPLE
SELECT n * 2 AS doubled FROM (SELECT COUNT(*) AS n FROM adult USING SAMPLE 10%) AS sampled
