-- expect: NotSupportedError COUNT
SELECT sex FROM adult GROUP BY sex
