SELECT race, COUNT(*) FROM adult WHERE income >= 10000 AND income < 100000 GROUP BY CUBE (race)
