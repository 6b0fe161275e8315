-- expect: NotSupportedError no declared domain
SELECT browser, person_id, COUNT(browser), SUM(age) FROM adult GROUP BY CUBE (browser, person_id)
