-- duckdb: SELECT main.adult.race, COUNT(*) AS n FROM main.adult WHERE main.adult.age > 40 GROUP BY main.adult.race
SELECT main.adult.race, COUNT(*) AS n FROM main.adult WHERE main.adult.age > 40 GROUP BY main.adult.race
