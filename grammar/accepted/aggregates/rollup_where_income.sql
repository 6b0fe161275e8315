SELECT sex, race, SUM(income) AS total, AVG(income) AS mean FROM adult WHERE age BETWEEN 25 AND 60 GROUP BY ROLLUP (sex, race)
