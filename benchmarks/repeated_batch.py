"""A repeated batch: all 2-way marginals of ``--columns`` binary attributes (4,950 statements for 100) sent
twice through ``Connection.workload`` on one connection, first call beside the repeat, in one run.

The repeat finds the plan, the compiled batch, the grouping sets (covers) and the backend's SQL by public
facts (statements, schema, budget); what it cannot reuse is reading the data again (the backend's
aggregation), summing the read rows into marginals, fresh noise, the GLS answers and the results. That is
on a connection with ``reuse=False``, where every call is a fresh measurement. On a default connection the
measurement is kept and the repeat is answered from it — nothing read, nothing charged — the last two rows (the
Fourier coefficients of binary attributes are Helmert residuals, so such a measurement is kept too); its first
call costs more than the ``reuse=False`` one (it keeps the measurement's estimates and answers from them). Each
call's shares are of the first call of its own connection, and each connection runs in a process of its own (the
planner's process-wide caches would warm the second connection's first call). Each
call is split into the backend's read (CPU seconds of the process while the backend runs, DuckDB's
threads included) and everything else; the repeat's "else" is what reuse can remove, reported as a
share of the first call's "else" and of its total. Each call starts after ``gc.collect()``: the kept batch
holds a few hundred thousand Python objects, and a full collection of them (about 0.2 s) falls on whichever
call crosses CPython's threshold, whatever that call does — it is the process's debt, not the call's work. The previous run's figures
(``results/repeated_batch.csv``) are printed beside the new ones.

    python benchmarks/repeated_batch.py [--columns 100] [--rows 20000]
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import itertools  # noqa: E402
import multiprocessing  # noqa: E402
import time  # noqa: E402
from unittest import mock  # noqa: E402

import duckdb  # noqa: E402

import dpsql  # noqa: E402
from dpsql.backends.duckdb import DuckDBBackend  # noqa: E402
from results_io import previous_rows, print_table, write_csv  # noqa: E402


def batch_calls(columns: int, rows: int, calls: int = 2, reuse: bool = False) -> list[dict[str, float]]:
    """``calls`` identical batches on one connection: CPU seconds of each, and of its backend read. ``reuse``: the
    connection keeps its measurements (the default of ``dpsql.connect``), so a repeat is answered from them."""
    database = duckdb.connect()
    database.execute(
        "CREATE TABLE t AS SELECT " + ", ".join(f"CAST(hash(i * {k + 3}) % 2 AS BIGINT) AS x{k}" for k in range(columns)) + f" FROM range({rows}) t(i)"
    )
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e9), reuse=reuse)
    connection.register("t", None, schema={"privacy_unit": None, "columns": {f"x{k}": {"categories": [0, 1]} for k in range(columns)}})
    statements = [f"SELECT x{a}, x{b}, COUNT(*) FROM t GROUP BY x{a}, x{b}" for a, b in itertools.combinations(range(columns), 2)]
    read = [0.0]
    run = DuckDBBackend.run

    def timed_run(backend: DuckDBBackend, sql: str) -> object:
        started = time.process_time()
        try:
            return run(backend, sql)
        finally:
            read[0] += time.process_time() - started

    measured = []
    with mock.patch.object(DuckDBBackend, "run", timed_run):
        for _ in range(calls):
            gc.collect()
            read[0], started = 0.0, time.process_time()
            connection.workload(statements, epsilon=1.0)
            total = time.process_time() - started
            measured.append({"total_s": total, "read_s": read[0], "else_s": total - read[0]})
    connection.close()
    return measured


def _number(text: str) -> float | str:
    """A figure read back from the previous run's CSV ("" when that run did not have it)."""
    return float(text) if text else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, default=100)
    parser.add_argument("--rows", type=int, default=20_000)
    arguments = parser.parse_args()
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:  # each connection in a new process:
        # the planner's process-wide caches would make the second connection's first call a warm one
        first, repeat = pool.apply(batch_calls, (arguments.columns, arguments.rows))
        kept_first, kept = pool.apply(batch_calls, (arguments.columns, arguments.rows, 2, True))
    before = {r["call"]: r for r in previous_rows("repeated_batch.csv")}
    records = []
    calls = (("first", first, first), ("repeat", repeat, first), ("first, default connection", kept_first, kept_first),
             ("repeat, default connection", kept, kept_first))
    for call, figures, own_first in calls:  # each call beside the first call of its own connection
        records.append({
            "call": call, **figures,
            "else_vs_first_else": figures["else_s"] / own_first["else_s"], "total_vs_first": figures["total_s"] / own_first["total_s"],
            "previous_total_s": _number(before.get(call, {}).get("total_s", "")), "previous_else_s": _number(before.get(call, {}).get("else_s", "")),
        })
    pairs = arguments.columns * (arguments.columns - 1) // 2
    print(f"{pairs:,} 2-way marginals of {arguments.columns} binary columns, {arguments.rows:,} rows; CPU seconds; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    columns = ["call", "total_s", "read_s", "else_s", "else_vs_first_else", "total_vs_first", "previous_total_s", "previous_else_s"]
    print_table(records, columns, lambda v: f"{v:.3g}" if isinstance(v, float) else ("—" if v == "" else str(v)))
    print(f"written to {write_csv('repeated_batch.csv', records, columns)}")


if __name__ == "__main__":
    main()
