-- expect: DataError unquoted
SELECT COUNT(*) FROM adult WHERE age > 'thirty'
