SELECT COUNT(*) AS pairs FROM visits a JOIN visits b ON a.person_id = b.person_id WHERE a.kind = 'a' AND b.kind = 'b'
