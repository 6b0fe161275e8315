-- expect: NotSupportedError FROM
SELECT COUNT(*) FROM read_csv('adult.csv')
