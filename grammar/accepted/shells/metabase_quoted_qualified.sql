-- ordered
-- duckdb: SELECT "main"."adult"."race" AS "race", count(*) AS "count" FROM "main"."adult" GROUP BY "main"."adult"."race" ORDER BY "main"."adult"."race" ASC
SELECT "public"."adult"."race" AS "race", count(*) AS "count" FROM "public"."adult" GROUP BY "public"."adult"."race" ORDER BY "public"."adult"."race" ASC
