-- expect: NotSupportedError USING SAMPLE
SELECT COUNT(*) FROM adult USING SAMPLE 10%
