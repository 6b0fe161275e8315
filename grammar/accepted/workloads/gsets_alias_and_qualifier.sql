SELECT a.sex AS s, GROUPING(a.sex) AS g, COUNT(1) AS total FROM adult AS a WHERE a.race IN (0, 1) GROUP BY GROUPING SETS ((a.sex), ())
