SELECT a.sex, a.n, b.mean_age FROM (SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex) AS a
JOIN (SELECT sex, AVG(age) AS mean_age FROM adult GROUP BY sex) AS b ON a.sex = b.sex
