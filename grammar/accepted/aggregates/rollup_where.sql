SELECT sex, race, SUM(age) AS total, AVG(age) AS mean FROM adult WHERE income >= 10000 GROUP BY ROLLUP (sex, race)
