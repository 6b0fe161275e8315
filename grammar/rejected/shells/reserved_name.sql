-- expect: ProgrammingError reserved
SELECT n AS __dpsql_se_n FROM (SELECT COUNT(*) AS n FROM adult) AS c
