SELECT sex, race, GROUPING(sex, race) AS g, GROUPING(race) AS gr, COUNT(*) AS n FROM adult GROUP BY CUBE (sex, race) ORDER BY g, sex, race
