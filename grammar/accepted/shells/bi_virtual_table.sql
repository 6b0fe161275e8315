SELECT sex AS sex, n AS n FROM (SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex) AS virtual_table LIMIT 1000
