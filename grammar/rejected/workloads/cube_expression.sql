-- expect: NotSupportedError GROUP BY
SELECT race, COUNT(*) FROM adult GROUP BY CUBE (race + 1)
