-- expect: NotSupportedError WHERE
SELECT COUNT(*) FROM adult WHERE lower(sex) = 'f'
