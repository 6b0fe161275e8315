-- expect: NotSupportedError GROUP BY
SELECT browser, person_id, COUNT(browser) FROM adult GROUP BY browser, person_id
