-- expect: DataError unquoted
SELECT race, COUNT(*) FROM adult WHERE race = '2.0' GROUP BY race
