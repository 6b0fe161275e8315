SELECT sex, race, COUNT(*), COUNT(job) FROM adult GROUP BY GROUPING SETS (sex, CUBE (sex, race), ROLLUP ((sex, race)))
