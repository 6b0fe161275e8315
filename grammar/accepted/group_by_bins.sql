SELECT income, COUNT(*) AS n FROM adult GROUP BY income
