-- expect: NotSupportedError JOIN
SELECT a.sex, COUNT(*) FROM adult a JOIN adult b ON a.person_id = b.person_id GROUP BY a.sex
