-- expect: NotSupportedError SELECT COUNT
SELECT sex, COUNT(browser) FROM adult GROUP BY sex
