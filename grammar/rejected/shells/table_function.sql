-- expect: NotSupportedError table functions
SELECT n, x.* FROM (SELECT COUNT(*) AS n FROM adult) AS c, read_csv('/etc/passwd') AS x
