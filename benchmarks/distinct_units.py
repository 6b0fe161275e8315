"""What COUNT(DISTINCT privacy unit) costs per statement: dpsql against DuckDB's exact COUNT(DISTINCT).

A generated visits table (``--units`` units with 1–10 visits each to one of 50 states, an age per visit) is
registered with ``max_groups_per_unit: 3``; a first statement keeps the bounded rows, then the best of
``--repeats`` runs is timed for ``SELECT state, COUNT(DISTINCT person_id) … WHERE age >= 30 GROUP BY state``
(each unit's (unit, state) pairs, at most 3 per unit by the salted order, then noise), the same statement
with COUNT(*), and DuckDB's exact COUNT(DISTINCT) on the same frame in the same process.

    python benchmarks/distinct_units.py [--units 200000] [--repeats 5]

Prints a table and writes benchmarks/results/distinct_units.csv.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import duckdb
import numpy as np
import pandas as pd
from results_io import print_table, write_csv

import dpsql

STATES = [f"S{i:02d}" for i in range(50)]
SQL = "SELECT state, COUNT(DISTINCT person_id) FROM visits WHERE age >= 30 GROUP BY state"


def visits(units: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    per_unit = rng.integers(1, 11, size=units)
    rows = int(per_unit.sum())
    return pd.DataFrame({
        "person_id": np.repeat(np.arange(units), per_unit),
        "state": rng.choice(STATES, size=rows),
        "age": rng.integers(18, 90, size=rows),
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    arguments = parser.parse_args()
    frame = visits(arguments.units)
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e9), reuse=False)
    schema = {"privacy_unit": "person_id", "max_rows_per_unit": 10, "max_groups_per_unit": 3,
              "columns": {"state": {"categories": STATES}, "age": {"range": [18, 89]}}}
    connection.register("visits", frame, schema=schema)
    cursor = connection.cursor()
    cursor.execute("SELECT COUNT(*) FROM visits", epsilon=1.0)  # keeps the bounded rows
    exact = duckdb.connect()
    exact.register("visits", frame)
    cases: dict[str, Callable[[], object]] = {
        "dpsql COUNT(DISTINCT unit)": lambda: cursor.execute(SQL, epsilon=1.0).fetchall(),
        "dpsql COUNT(*)": lambda: cursor.execute(SQL.replace("COUNT(DISTINCT person_id)", "COUNT(*)"), epsilon=1.0).fetchall(),
        "DuckDB exact COUNT(DISTINCT)": lambda: exact.execute(SQL).fetchall(),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(arguments.repeats):  # interleaved, so load changes hit every case alike
        for name, run in cases.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    reference = min(times["DuckDB exact COUNT(DISTINCT)"])
    rows = [{"case": name, "rows": len(frame), "units": arguments.units, "best_ms": round(min(t) * 1000, 1),
             "vs_duckdb_distinct": round(min(t) / reference, 2)} for name, t in times.items()]
    columns = ["case", "rows", "units", "best_ms", "vs_duckdb_distinct"]
    print_table(rows, columns)
    write_csv("distinct_units.csv", rows, columns)
    connection.close()


if __name__ == "__main__":
    main()
