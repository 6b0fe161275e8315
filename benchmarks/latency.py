"""Latency of one private GROUP BY COUNT beside DuckDB's exact query, and beside SmartNoise SQL on small tables.

**Large tables.** Both run in the same process on the same DuckDB table, in the same run, alternating,
after one warm-up each; the cold first private call is reported apart: with a privacy unit it also
computes the table's bounded rows, which every later statement reads (``dpsql/bounded_tables.py``). Two
generated tables: ``census`` (``--rows`` rows, runs of 1-5 rows per person, ≈2.5 on average: few persons
over the bound of 3 among the rows aged 20-40, a third of all rows in persons of 4 or 5 rows) and
``events`` (``--event-rows`` rows of visitors with 1-8 rows each, 4.5 on average: most visitors over the
bound of 3, as in event or visit tables). Settings: row-level privacy (no unit column: no bounding) and
person-level privacy (at most 3 rows per unit).

**Small tables** (``--small-rows``, 1k-50k rows of ``census``): dpsql's time per statement beside SmartNoise
SQL's (its pandas reader) for the same statement, row-level and person-level, medians of ``--small-repeats``
after a warm-up. SmartNoise runs in its own environment, never a dpsql dependency:

    python3 -m venv /tmp/bench-snsql && /tmp/bench-snsql/bin/pip install smartnoise-sql pandas
    DPSQL_PEER_PYTHON=/tmp/bench-snsql/bin/python python benchmarks/latency.py [--rows 10000000] [--repeats 7]
    python benchmarks/latency.py --rows 100000000 --repeats 3 --small-rows --csv latency_100m.csv   # 100 M rows

(without DPSQL_PEER_PYTHON the SmartNoise column stays empty). Prints tables and writes
benchmarks/results/latency.csv and benchmarks/results/latency_small.csv.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import duckdb

import dpsql
from results_io import previous_rows, write_csv

QUERY = "SELECT sex, race, COUNT(*) AS n FROM census WHERE age BETWEEN 20 AND 40 GROUP BY sex, race"
UNFILTERED_QUERY = "SELECT sex, race, COUNT(*) AS n FROM census GROUP BY sex, race"
EVENTS_QUERY = "SELECT sex, race, COUNT(*) AS n FROM events GROUP BY sex, race"
HERE = Path(__file__).resolve().parent
COLUMNS = {
    "sex": {"categories": ["F", "M"]},
    "race": {"categories": [0, 1, 2, 3, 4]},
    "age": {"range": [17, 90]},
    "income": {"bins": [0, 10000, 50000, 100000, 1000000]},
}
ROW_LEVEL = {"privacy_unit": None, "max_rows_per_unit": 1, "columns": COLUMNS}
PERSON_LEVEL = {"privacy_unit": "person_id", "max_rows_per_unit": 3, "columns": COLUMNS}
CASES = (  # (setting, table, schema, statement)
    ("row-level", "census", ROW_LEVEL, QUERY),
    ("person-level (k=3)", "census", PERSON_LEVEL, QUERY),
    ("person-level (k=3), no WHERE", "census", PERSON_LEVEL, UNFILTERED_QUERY),
    ("person-level (k=3), events", "events", PERSON_LEVEL, EVENTS_QUERY),
)
SMALL_SETTINGS = (("row-level", ROW_LEVEL, 0), ("person-level (k=3)", PERSON_LEVEL, 3))  # (setting, schema, SmartNoise max_ids)
SMALL_ROWS = (1_000, 10_000, 50_000)


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


def generate_events(database: duckdb.DuckDBPyConnection, rows: int) -> None:
    """A seeded event table: ``rows / 4.5`` visitors with 1-8 rows each (4.5 on average; 5 in 8 visitors over
    a bound of 3), the census columns drawn per row."""
    visitors = max(1, round(rows / 4.5))
    database.execute(
        f"""
        CREATE OR REPLACE TABLE events AS
        SELECT
            v AS person_id,
            CASE WHEN hash(v, j, 1) % 2 = 0 THEN 'F' ELSE 'M' END AS sex,
            CAST(CASE WHEN hash(v, j, 2) % 100 < 62 THEN 0 WHEN hash(v, j, 2) % 100 < 75 THEN 1
                      WHEN hash(v, j, 2) % 100 < 87 THEN 2 WHEN hash(v, j, 2) % 100 < 96 THEN 3 ELSE 4 END AS BIGINT) AS race,
            CAST(17 + hash(v, j, 3) % 74 AS BIGINT) AS age,
            CAST(hash(v, j, 4) % 200000 AS BIGINT) AS income
        FROM (SELECT v, unnest(range(1 + CAST(hash(v, 7) % 8 AS BIGINT))) AS j FROM range({visitors}) AS t(v))
        """
    )


def timed(action) -> float:  # noqa: ANN001
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure(database: duckdb.DuckDBPyConnection, setting: str, table: str, schema: dict, query: str, repeats: int) -> dict[str, object]:
    """dpsql's statement beside DuckDB's exact query on the same table, alternating, medians of
    ``repeats`` runs after one warm-up each (the cold first private call is reported apart)."""
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6), reuse=False)  # time a fresh release each run
    connection.register(table, None, schema=schema)
    cursor = connection.cursor()
    cold = timed(lambda: cursor.execute(query, epsilon=0.5).fetchall())
    timed(lambda: database.execute(query).fetchall())
    private, exact = [], []
    for _ in range(repeats):
        exact.append(timed(lambda: database.execute(query).fetchall()))
        private.append(timed(lambda: cursor.execute(query, epsilon=0.5).fetchall()))
    connection.close()  # drops the kept bounded rows
    record: dict[str, object] = {
        "setting": setting,
        "query": query,
        "rows": database.execute(f"SELECT count(*) FROM {table}").fetchone()[0],
        "duckdb_exact_s": statistics.median(exact),
        "dpsql_s": statistics.median(private),
        "dpsql_cold_s": cold,
    }
    record["ratio"] = record["dpsql_s"] / record["duckdb_exact_s"]
    record["peak_rss_mb"] = peak_rss_mb()
    return record


def bounding_query(table: str, query: str, bound: int = 3) -> str:
    """``query`` with DuckDB doing the same contribution bounding itself first: at most ``bound`` rows per
    person, in a hashed order (``QUALIFY row_number() …``) — the floor of a first statement's time."""
    kept = (
        f"(SELECT * FROM {table} QUALIFY row_number() OVER (PARTITION BY person_id ORDER BY hash(person_id, sex, race, age, income)) "
        f"<= {bound}) AS {table}"
    )
    return query.replace(f"FROM {table}", f"FROM {kept}", 1)


def first_statement(database: duckdb.DuckDBPyConnection, setting: str, table: str, schema: dict, query: str) -> dict[str, object]:
    """The first statement after ``register()`` (it bounds each unit's rows) beside DuckDB's bounding query
    (:func:`bounding_query`, after one warm-up), wall seconds of one run each."""
    bounding = bounding_query(table, query, int(schema["max_rows_per_unit"]))
    database.execute(bounding).fetchall()
    duckdb_s = timed(lambda: database.execute(bounding).fetchall())
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6), reuse=False)
    connection.register(table, None, schema=schema)
    dpsql_s = timed(lambda: connection.cursor().execute(query, epsilon=0.5).fetchall())
    connection.close()
    return {"setting": setting, "rows": database.execute(f"SELECT count(*) FROM {table}").fetchone()[0],
            "duckdb_bounding_s": duckdb_s, "dpsql_first_s": dpsql_s, "ratio": dpsql_s / duckdb_s}


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, DuckDB's own allocations included (MB; Linux units)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def dpsql_per_statement(database: duckdb.DuckDBPyConnection, schema: dict, repeats: int) -> float:
    """dpsql's median time per statement (QUERY) on ``census``, after a warm-up."""
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6), reuse=False)
    connection.register("census", None, schema=schema)
    cursor = connection.cursor()
    cursor.execute(QUERY, epsilon=0.5).fetchall()
    times = [timed(lambda: cursor.execute(QUERY, epsilon=0.5).fetchall()) for _ in range(repeats)]
    connection.close()
    return statistics.median(times)


def smartnoise_per_statement(path: Path, max_ids: int, repeats: int) -> tuple[float, str] | None:
    """SmartNoise SQL's median time per statement (QUERY) on the CSV at ``path``, in the peer environment
    (DPSQL_PEER_PYTHON), and its version; None without a peer."""
    python = os.environ.get("DPSQL_PEER_PYTHON")
    if not python:
        return None
    output = subprocess.run(
        [python, str(HERE / "peers" / "smartnoise_latency.py"), str(path), str(max_ids), "0.5", str(repeats), QUERY],
        check=True, capture_output=True, text=True,
    ).stdout.strip().splitlines()
    return float(json.loads(output[0])["median_s"]), json.loads(output[-1])["smartnoise-sql"]


def small_tables(sizes: tuple[int, ...], repeats: int) -> list[dict[str, object]]:
    """Per-statement time of dpsql and SmartNoise SQL on small census tables (module doc)."""
    records = []
    with tempfile.TemporaryDirectory() as directory:
        for rows in sizes:
            database = duckdb.connect()
            generate(database, rows)
            path = Path(directory) / f"census_{rows}.csv"
            database.execute(f"COPY census TO '{path}' (HEADER)")
            for setting, schema, max_ids in SMALL_SETTINGS:
                mine = dpsql_per_statement(database, schema, repeats)
                peer = smartnoise_per_statement(path, max_ids, repeats)
                records.append({
                    "setting": setting, "query": QUERY, "rows": rows, "dpsql_s": mine,
                    "smartnoise_s": "" if peer is None else peer[0],
                    "smartnoise_over_dpsql": "" if peer is None else peer[0] / mine,
                    "smartnoise_version": "" if peer is None else peer[1],
                })
            database.close()
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--event-rows", type=int, default=5_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--small-rows", type=int, nargs="*", default=list(SMALL_ROWS))
    parser.add_argument("--small-repeats", type=int, default=30)
    parser.add_argument("--csv", default="latency.csv", help="results file name (e.g. latency_100m.csv for a big run)")
    arguments = parser.parse_args()

    database = duckdb.connect()
    started = time.perf_counter()
    generate(database, arguments.rows)
    generate_events(database, arguments.event_rows)
    for table in ("census", "events"):
        rows, units, most, over = database.execute(
            f"SELECT sum(c), count(*), max(c), avg(CAST(c > 3 AS DOUBLE)) FROM (SELECT person_id, count(*) c FROM {table} GROUP BY 1)"
        ).fetchone()
        print(f"{table}: {rows:,} rows, {units:,} units (at most {most} rows each; {over:.0%} of units over 3 rows)")
    print(f"generated in {time.perf_counter() - started:.1f} s; peak resident memory {peak_rss_mb():,.0f} MB")

    before = {r["setting"]: f"{float(r['ratio']):.2f}" for r in previous_rows(arguments.csv)}
    records = [measure(database, setting, table, schema, query, arguments.repeats) for setting, table, schema, query in CASES]
    print(f"\n{QUERY}\n(no WHERE: {UNFILTERED_QUERY}; events: {EVENTS_QUERY})\n")
    print(f"{'setting':<30} {'rows':>11} {'DuckDB exact (s)':>17} {'dpsql (s)':>10} {'ratio':>7} {'previous':>9} {'dpsql cold (s)':>15} {'peak RSS (MB)':>14}")
    for r in records:
        old = before.get(str(r["setting"]), "")
        print(
            f"{r['setting']:<30} {r['rows']:>11,} {r['duckdb_exact_s']:>17.3f} {r['dpsql_s']:>10.3f} {r['ratio']:>7.2f} "
            f"{old or '—':>9} {r['dpsql_cold_s']:>15.3f} {r['peak_rss_mb']:>14,.0f}"
        )
    path = write_csv(arguments.csv, records)
    print(f"\nmedians of {arguments.repeats} runs; peak RSS: the process's so far (DuckDB's memory included); written to {path}")

    before = {r["setting"]: r["ratio"] for r in previous_rows("latency_first.csv")}
    # after the later statements' table: the process is warm, as a user's is at their first statement
    first = [first_statement(database, setting, table, schema, query) for setting, table, schema, query in CASES if schema["privacy_unit"]]
    print("\nthe first statement after register() (it bounds each unit's rows) ÷ DuckDB doing the same bounding "
          "(QUALIFY row_number() … <= 3, then the GROUP BY); wall seconds of one run each\n")
    print(f"{'setting':<30} {'rows':>11} {'DuckDB bounding (s)':>20} {'dpsql first (s)':>16} {'ratio':>7} {'previous ratio':>15}")
    for r in first:
        print(f"{r['setting']:<30} {r['rows']:>11,} {r['duckdb_bounding_s']:>20.3f} {r['dpsql_first_s']:>16.3f} {r['ratio']:>7.2f} "
              f"{before.get(r['setting'], '—'):>15}")
    write_csv("latency_first.csv", [{**r, "ratio": f"{r['ratio']:.3f}"} for r in first])

    if arguments.small_rows:
        small = small_tables(tuple(arguments.small_rows), arguments.small_repeats)
        print(f"\nsmall tables, per statement: {QUERY}\n")
        print(f"{'setting':<20} {'rows':>7} {'dpsql (ms)':>11} {'SmartNoise (ms)':>16} {'SmartNoise ÷ dpsql':>19}")
        for r in small:
            peer = "—" if r["smartnoise_s"] == "" else f"{1000 * r['smartnoise_s']:.1f}"  # type: ignore[operator]
            ratio = "—" if r["smartnoise_over_dpsql"] == "" else f"{r['smartnoise_over_dpsql']:.1f}"
            print(f"{r['setting']:<20} {r['rows']:>7,} {1000 * r['dpsql_s']:>11.2f} {peer:>16} {ratio:>19}")  # type: ignore[operator]
        path = write_csv("latency_small.csv", small)
        version = next((r["smartnoise_version"] for r in small if r["smartnoise_version"]), None)
        print(f"\nmedians of {arguments.small_repeats} statements" + (f"; SmartNoise SQL {version}" if version else
              "; SmartNoise skipped (set DPSQL_PEER_PYTHON, see the module doc)") + f"; written to {path}")


if __name__ == "__main__":
    main()
