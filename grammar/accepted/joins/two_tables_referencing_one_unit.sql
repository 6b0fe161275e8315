SELECT v.kind, COUNT(*) AS n FROM visits v JOIN labs l ON v.person_id = l.person_id WHERE l.value > 4 GROUP BY v.kind
