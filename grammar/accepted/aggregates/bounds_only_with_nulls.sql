SELECT race, COUNT(*), SUM(tip) AS tips, AVG(tip) AS mean_tip FROM adult GROUP BY race ORDER BY race
