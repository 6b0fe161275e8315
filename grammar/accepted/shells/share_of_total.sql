SELECT sex, COUNT(*) / (SELECT COUNT(*) FROM adult) AS share FROM adult GROUP BY sex
