SELECT sex, SUM(age) * 1 AS s, POWER(AVG(age), 2) AS square, (SUM(age)) AS total, COUNT(*) - 1 AS fewer, -AVG(age) AS negated
FROM adult GROUP BY sex
