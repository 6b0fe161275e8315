SELECT race, COUNT(*) FROM adult WHERE job IS NOT NULL AND NOT (sex = 'F') GROUP BY race
