-- expect: NotSupportedError ordered domain
SELECT race, MEDIAN(sex) FROM adult GROUP BY race
