-- duckdb: SELECT "adult"."sex" AS "sex", SUM(1) AS "cnt:adult" FROM "main"."adult" "adult" GROUP BY 1
SELECT "adult"."sex" AS "sex", SUM(1) AS "cnt:adult" FROM "public"."adult" "adult" GROUP BY 1
