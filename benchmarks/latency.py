"""Latency of one private GROUP BY COUNT on a generated 10-million-row table, beside DuckDB's exact query.

Both run in the same process on the same DuckDB table, in the same run, alternating, after one
warm-up each (the warm-up also fills dpsql's plan cache; the cold first call is reported apart).
Two privacy settings: row-level privacy (no unit column: no bounding) and person-level privacy (a
unit column, at most 3 rows per person). Person-level bounding counts every unit's rows (one
aggregation by unit) and ranks only the rows of units over the bound; the statement is timed with
its WHERE clause (few persons have more than 3 rows aged 20-40) and without (a third of the rows
belong to persons with 4 or 5 rows, all ranked).

    python benchmarks/latency.py [--rows 10000000] [--repeats 7]

Prints a table and writes benchmarks/results/latency.csv.
"""

from __future__ import annotations

import argparse
import statistics
import time

import duckdb

import dpsql
from results_io import write_csv

QUERY = "SELECT sex, race, COUNT(*) AS n FROM census WHERE age BETWEEN 20 AND 40 GROUP BY sex, race"
UNFILTERED_QUERY = "SELECT sex, race, COUNT(*) AS n FROM census GROUP BY sex, race"
COLUMNS = {
    "sex": {"categories": ["F", "M"]},
    "race": {"categories": [0, 1, 2, 3, 4]},
    "age": {"range": [17, 90]},
    "income": {"bins": [0, 10000, 50000, 100000, 1000000]},
}
ROW_LEVEL = {"privacy_unit": None, "max_rows_per_unit": 1, "columns": COLUMNS}
PERSON_LEVEL = {"privacy_unit": "person_id", "max_rows_per_unit": 3, "columns": COLUMNS}
CASES = (  # (setting, schema, statement)
    ("row-level", ROW_LEVEL, QUERY),
    ("person-level (k=3)", PERSON_LEVEL, QUERY),
    ("person-level (k=3), no WHERE", PERSON_LEVEL, UNFILTERED_QUERY),
)


def generate(database: duckdb.DuckDBPyConnection, rows: int) -> None:
    """A seeded census-like table: runs of 1-5 rows per person (≈2.5 on average), skewed race, ages 17-90."""
    database.execute(
        f"""
        CREATE OR REPLACE TABLE census AS
        SELECT
            sum(CASE WHEN hash(i, 11) % 3 = 0 OR i % 5 = 0 THEN 1 ELSE 0 END)
                OVER (ORDER BY i ROWS UNBOUNDED PRECEDING) AS person_id,
            CASE WHEN hash(i, 1) % 2 = 0 THEN 'F' ELSE 'M' END AS sex,
            CAST(CASE WHEN hash(i, 2) % 100 < 62 THEN 0 WHEN hash(i, 2) % 100 < 75 THEN 1
                      WHEN hash(i, 2) % 100 < 87 THEN 2 WHEN hash(i, 2) % 100 < 96 THEN 3 ELSE 4 END AS BIGINT) AS race,
            CAST(17 + hash(i, 3) % 74 AS BIGINT) AS age,
            CAST(hash(i, 4) % 200000 AS BIGINT) AS income
        FROM range({rows}) AS t(i)
        ORDER BY i
        """
    )


def timed(action) -> float:  # noqa: ANN001
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure(database: duckdb.DuckDBPyConnection, setting: str, schema: dict, query: str, repeats: int) -> dict[str, object]:
    """dpsql's statement beside DuckDB's exact query on the same table, alternating, medians of
    ``repeats`` runs after one warm-up each (the cold first private call is reported apart)."""
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6), reuse=False)  # time a fresh release each run
    connection.register("census", None, schema=schema)
    cursor = connection.cursor()
    cold = timed(lambda: cursor.execute(query, epsilon=0.5).fetchall())
    timed(lambda: database.execute(query).fetchall())
    private, exact = [], []
    for _ in range(repeats):
        exact.append(timed(lambda: database.execute(query).fetchall()))
        private.append(timed(lambda: cursor.execute(query, epsilon=0.5).fetchall()))
    record: dict[str, object] = {
        "setting": setting,
        "query": query,
        "rows": database.execute("SELECT count(*) FROM census").fetchone()[0],
        "duckdb_exact_s": statistics.median(exact),
        "dpsql_s": statistics.median(private),
        "dpsql_cold_s": cold,
    }
    record["ratio"] = record["dpsql_s"] / record["duckdb_exact_s"]
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    arguments = parser.parse_args()

    database = duckdb.connect()
    started = time.perf_counter()
    generate(database, arguments.rows)
    persons, most = database.execute("SELECT count(DISTINCT person_id), max(c) FROM (SELECT person_id, count(*) c FROM census GROUP BY 1)").fetchone()
    print(f"generated {arguments.rows:,} rows, {persons:,} persons (at most {most} rows each) in {time.perf_counter() - started:.1f} s")

    records = [measure(database, setting, schema, query, arguments.repeats) for setting, schema, query in CASES]

    print(f"\n{QUERY}\n(no WHERE: {UNFILTERED_QUERY})\n")
    print(f"{'setting':<30} {'DuckDB exact (s)':>17} {'dpsql (s)':>10} {'ratio':>7} {'dpsql cold (s)':>15}")
    for r in records:
        print(f"{r['setting']:<30} {r['duckdb_exact_s']:>17.3f} {r['dpsql_s']:>10.3f} {r['ratio']:>7.2f} {r['dpsql_cold_s']:>15.3f}")
    path = write_csv("latency.csv", records)
    print(f"\nmedians of {arguments.repeats} runs; written to {path}")


if __name__ == "__main__":
    main()
