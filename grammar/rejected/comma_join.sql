-- expect: NotSupportedError JOIN
SELECT COUNT(*) FROM adult, adult AS other
