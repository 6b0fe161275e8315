SELECT floor(age / 20) AS d, race, COUNT(*) FROM adult GROUP BY GROUPING SETS ((d, race), (d), ())
