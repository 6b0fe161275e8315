SELECT SUM(n) AS total, MAX(n) AS largest, COUNT(*) AS groups FROM (SELECT race, COUNT(*) AS n FROM adult GROUP BY race) AS counts
