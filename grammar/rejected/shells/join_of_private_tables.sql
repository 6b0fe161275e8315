-- expect: NotSupportedError JOIN
SELECT a.sex, COUNT(*) FROM adult a JOIN adult b ON a.race = b.race GROUP BY a.sex
