"""Workloads of any width: time and memory of one very wide batch, dpsql beside DuckDB's exact GROUPING SETS.

Two cases, each run by dpsql and by DuckDB in a fresh subprocess of its own (so the peak RSS is the case's
own), one after the other in the same run:

- ``adult 3-way``: the real Adult table (48,842 rows, ``adult.csv`` of ``shared/data`` beside the repository, or
  of ``$DPSQL_BENCH_DATA``), every one of its 14
  columns declared ``{range: [0, size - 1]}`` with the size of the public domain file published with it
  (``adult-domain.json``; never from the rows), row-level privacy; all 364 three-way marginals, 20,894,536
  cells;
- ``binary 2-way``: ``--rows`` generated rows of 100 binary columns (as ``repeated_batch.py``), all 4,950
  two-way marginals, 19,800 cells.

**dpsql**: the statements ``SELECT a, b, c, COUNT(*) FROM t GROUP BY a, b, c``, one per marginal, sent as ONE
batch through ``dpsql.connect(...).workload([...], epsilon=1.0)`` (one plan, one read: a single GROUPING SETS
aggregation, one charge) on a default connection (it keeps the measurement); then every released cell is
read the way a user reads results one at a time: ``result.fetchall()`` of each result in turn (a list of
plain-Python tuples, dropped before the next). **DuckDB**: one ``SELECT …, COUNT(*) FROM t GROUP BY GROUPING
SETS ((a, b, c), …)`` over the same sets on the same table, ``fetchall()`` of its rows. DuckDB returns only
the cells some row falls in (its exact answer); dpsql returns every cell of every marginal's public domain
(a noisy zero is a measurement too), so its cell count is the domains'.

Reported per case and engine: CPU seconds of the call (``workload`` / ``execute``: DuckDB's threads
included) and of the read, their sum (robust to load) and its ratio to DuckDB's, wall seconds (not robust
to load), the RSS after imports, loading and ``register`` (``baseline``), the peak RSS (``ru_maxrss``, the
engine's own allocations included: dpsql's read is a DuckDB aggregation, so its peak holds DuckDB's too),
the released cells, and **bytes per released cell beyond the answer** = (peak − baseline − answer) / cells,
where *the answer itself* is, per cell, what a released cell is: its value and standard error as two
float64 (16 bytes; DuckDB's exact count: one int64, 8 bytes) plus each group key in the narrowest unsigned
integer type that holds its domain (one byte per key in both cases here). The previous run's figures
(``results/wide_batch.csv``) are printed beside the new ones.

    DPSQL_BENCH_DATA=/work/shared/data python benchmarks/wide_batch.py [--cases "adult 3-way" "binary 2-way"] [--rows 20000]
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("DPSQL_BENCH_DATA", HERE.parent.parent / "shared" / "data"))  # the repository sits beside shared/
ENGINES = ("dpsql", "duckdb")
EPSILON = 1.0


@dataclass(frozen=True)
class Table:
    """A loaded table: its columns' domain sizes (public), and the key sets of the batch."""

    sizes: dict[str, int]
    sets: tuple[tuple[str, ...], ...]


def adult(database: object, rows: int) -> Table:
    """The Adult table with SQL names, every column's domain from the published domain file; all 3-way sets."""
    import pandas as pd

    sys.path.insert(0, str(HERE))
    from peers.shared_table import read_table, sql_name

    frame: pd.DataFrame = read_table(DATA / "adult.csv")
    database.register("frame", frame)  # type: ignore[attr-defined]
    database.execute("CREATE TABLE t AS SELECT * FROM frame")  # type: ignore[attr-defined]
    database.unregister("frame")  # type: ignore[attr-defined]
    sizes = {sql_name(name): size for name, size in json.loads((DATA / "adult-domain.json").read_text()).items()}
    return Table(sizes, tuple(itertools.combinations(sizes, 3)))


def binary(database: object, rows: int) -> Table:
    """``rows`` rows of 100 generated binary columns; all 2-way sets."""
    names = [f"x{k}" for k in range(100)]
    database.execute(  # type: ignore[attr-defined]
        "CREATE TABLE t AS SELECT " + ", ".join(f"CAST(hash(i * {k + 3}) % 2 AS BIGINT) AS {n}" for k, n in enumerate(names))
        + f" FROM range({rows}) t(i)"
    )
    return Table({n: 2 for n in names}, tuple(itertools.combinations(names, 2)))


CASES: dict[str, Callable[[object, int], Table]] = {"adult 3-way": adult, "binary 2-way": binary}


def rss_bytes() -> int:
    """The process's resident memory now (Linux: ``/proc/self/statm``)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """The process's peak resident memory so far, the engine's own allocations included (Linux: KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def answer_bytes(table: Table, engine: str) -> float:
    """Bytes of the answer itself, per released cell averaged over the batch (module doc): value (and standard error)
    as 8-byte numbers, each key in the narrowest unsigned integer type of its domain."""
    number = 16 if engine == "dpsql" else 8
    cells = [math.prod(table.sizes[c] for c in s) for s in table.sets]
    keys = [sum(np.min_scalar_type(table.sizes[c] - 1).itemsize for c in s) for s in table.sets]
    return number + sum(k * n for k, n in zip(keys, cells)) / sum(cells)


def run_dpsql(database: object, table: Table) -> tuple[Callable[[], object], Callable[[object], int]]:
    import dpsql

    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=EPSILON))
    connection.register("t", None, schema={"privacy_unit": None, "columns": {c: {"range": [0, n - 1]} for c, n in table.sizes.items()}})
    statements = [f"SELECT {', '.join(s)}, COUNT(*) FROM t GROUP BY {', '.join(s)}" for s in table.sets]

    def read(results: object) -> int:
        return sum(len(result.fetchall()) for result in results)  # type: ignore[attr-defined]

    return (lambda: connection.workload(statements, epsilon=EPSILON)), read


def run_duckdb(database: object, table: Table) -> tuple[Callable[[], object], Callable[[object], int]]:
    sets = ", ".join("(" + ", ".join(s) + ")" for s in table.sets)
    sql = f"SELECT {', '.join(table.sizes)}, COUNT(*) FROM t GROUP BY GROUPING SETS ({sets})"

    def read(result: object) -> int:
        return len(result.fetchall())  # type: ignore[attr-defined]

    return (lambda: database.execute(sql)), read  # type: ignore[attr-defined]


def child(case: str, engine: str, rows: int) -> dict[str, object]:
    """One case by one engine, in this (fresh) process: the figures of the module doc."""
    import duckdb

    database = duckdb.connect()
    table = CASES[case](database, rows)
    call, read = (run_dpsql if engine == "dpsql" else run_duckdb)(database, table)
    gc.collect()
    baseline = rss_bytes()
    started_cpu, started_wall = time.process_time(), time.perf_counter()
    results = call()
    called_cpu = time.process_time()
    cells = read(results)
    read_cpu, wall = time.process_time() - called_cpu, time.perf_counter() - started_wall
    peak = peak_rss_bytes()
    answer = answer_bytes(table, engine)
    return {
        "case": case, "engine": engine, "sets": len(table.sets), "cells": cells,
        "call_cpu_s": called_cpu - started_cpu, "read_cpu_s": read_cpu, "cpu_s": called_cpu - started_cpu + read_cpu, "wall_s": wall,
        "baseline_mb": baseline / 2**20, "peak_mb": peak / 2**20, "answer_b_per_cell": answer,
        "beyond_b_per_cell": (peak - baseline - answer * cells) / cells,
    }


def measured(case: str, engine: str, rows: int) -> dict[str, object]:
    """:func:`child` in a fresh interpreter (so that its peak RSS is the case's own)."""
    done = subprocess.run([sys.executable, __file__, "--child", case, engine, "--rows", str(rows)], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _number(text: str) -> float | str:
    """A figure read back from the previous run's CSV ("" when that run did not have it)."""
    return float(text) if text else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--rows", type=int, default=20_000, help="rows of the generated binary table")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "ENGINE"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        print(json.dumps(child(*arguments.child, arguments.rows)))
        return
    from results_io import previous_rows, print_table, write_csv

    before = {(r["case"], r["engine"]): r for r in previous_rows("wide_batch.csv")}
    records = []
    for case in arguments.cases:
        found = {engine: measured(case, engine, arguments.rows) for engine in ENGINES}
        for engine in ENGINES:
            record = found[engine]
            earlier = before.get((case, engine), {})
            record["cpu_vs_duckdb"] = record["cpu_s"] / found["duckdb"]["cpu_s"]  # type: ignore[operator]
            record["previous_cpu_s"] = _number(earlier.get("cpu_s", ""))
            record["previous_peak_mb"] = _number(earlier.get("peak_mb", ""))
            record["previous_beyond_b_per_cell"] = _number(earlier.get("beyond_b_per_cell", ""))
            records.append(record)
    print(f"one batch per case, ε = {EPSILON}; CPU seconds (DuckDB's threads included); load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores; each case and engine in a fresh process")
    columns = ["case", "engine", "sets", "cells", "call_cpu_s", "read_cpu_s", "cpu_s", "cpu_vs_duckdb", "wall_s", "baseline_mb",
               "peak_mb", "answer_b_per_cell", "beyond_b_per_cell", "previous_cpu_s", "previous_peak_mb", "previous_beyond_b_per_cell"]
    print_table(records, columns, lambda v: f"{v:.3g}" if isinstance(v, float) else ("—" if v == "" else f"{v:,}" if isinstance(v, int) else str(v)))
    print(f"written to {write_csv('wide_batch.csv', records, columns)}")


if __name__ == "__main__":
    main()
