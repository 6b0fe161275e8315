SELECT "sex", COUNT(*) AS "Count" FROM adult GROUP BY "sex"
