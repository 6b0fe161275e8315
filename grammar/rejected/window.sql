-- expect: NotSupportedError SELECT
SELECT sex, COUNT(*) OVER () FROM adult
