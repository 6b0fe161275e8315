"""What a public shell costs: the same private core run plain, inside the outer SELECT BI tools send, and
with post-processing (a window, HAVING on a key, ORDER BY / LIMIT), beside DuckDB's exact answer to the same
SQL, on the generated ``census`` table of ``latency.py`` (person-level privacy, at most 3 rows per person).

Every dpsql statement is measured afresh (``reuse=False``: one read, one charge each); times are the median of
``--repeats`` after one warm-up, in the same process and run, alternating with DuckDB. The shell adds one
DuckDB query over the released rows at release and one over empty releases at prepare.

    python benchmarks/shells.py [--rows 1000000] [--repeats 7]

Prints a table and writes benchmarks/results/shells.csv.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import duckdb

import dpsql
from latency import PERSON_LEVEL, generate
from results_io import print_table, write_csv

CORE = "SELECT sex, race, COUNT(*) AS n FROM census WHERE age BETWEEN 20 AND 40 GROUP BY sex, race"
STATEMENTS = (
    ("plain core", CORE),
    ("BI wrapper (outer SELECT … LIMIT 1000)", f"SELECT * FROM ({CORE}) AS virtual_table LIMIT 1000"),
    ("window, HAVING on a key, ORDER BY / LIMIT",
     "SELECT sex, race, COUNT(*) AS n, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER (PARTITION BY sex) AS pct FROM census "
     "WHERE age BETWEEN 20 AND 40 GROUP BY sex, race HAVING race <> 4 OR COUNT(*) > 10 ORDER BY pct DESC LIMIT 5"),
)


def median_seconds(action, repeats: int) -> float:  # noqa: ANN001
    action()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    arguments = parser.parse_args()
    database = duckdb.connect()
    generate(database, arguments.rows)
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6), reuse=False)
    connection.register("census", "census", schema=PERSON_LEVEL)
    cursor = connection.cursor()
    rows = []
    for name, sql in STATEMENTS:
        private = median_seconds(lambda: cursor.execute(sql, epsilon=1.0).fetchall(), arguments.repeats)
        exact = median_seconds(lambda: database.execute(sql).fetchall(), arguments.repeats)
        rows.append({"statement": name, "dpsql_s": round(private, 4), "duckdb_s": round(exact, 4), "ratio": round(private / exact, 2)})
    print(f"a private core plain and inside a public shell, {arguments.rows:,} rows, person-level (k=3); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print_table(rows, list(rows[0]))
    write_csv("shells.csv", rows)


if __name__ == "__main__":
    main()
