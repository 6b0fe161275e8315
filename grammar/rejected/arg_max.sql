-- expect: NotSupportedError ARG_MAX
SELECT sex, ARG_MAX(job, age) FROM adult GROUP BY sex
