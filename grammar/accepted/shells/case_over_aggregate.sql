SELECT race, CASE WHEN COUNT(*) > 400 THEN 'large' WHEN COUNT(*) > 100 THEN 'medium' ELSE 'small' END AS size FROM adult GROUP BY race
