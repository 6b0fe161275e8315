-- ordered
SELECT * FROM (SELECT race, COUNT(*) AS n, AVG(age) AS mean_age FROM adult GROUP BY race) AS virtual_table ORDER BY race LIMIT 1000
