SELECT income, sex, COUNT(*) FROM adult WHERE income < 50000 GROUP BY income, sex
