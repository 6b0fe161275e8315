SELECT COUNT(*) AS n FROM adult WHERE sex = 'F'
