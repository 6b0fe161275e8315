-- expect: NotSupportedError TABLESAMPLE
SELECT sex, COUNT(*) FROM adult TABLESAMPLE 10% GROUP BY sex
