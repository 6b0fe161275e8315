"""Quantiles and ranges over fine ordered domains (10³–10⁶ values), beside DuckDB's exact answers, in one run.

One generated table of ``--rows`` incomes (log-normal, clipped to [0, 500000]) and a two-valued group
column. Each case declares the income column differently (1,024 bins with rounded edges of an even split;
1,024 bins of one integer width; every integer) and asks the same questions:

* ``99 quantiles``: ``PERCENTILE_CONT(q)`` for q = 0.01 … 0.99 (one CDF per group, shared by all 99),
  beside DuckDB's exact ``quantile_cont(income, [0.01, …, 0.99])``;
* ``100 ranges``: a batch of about 100 ``COUNT(*) … WHERE income >= a AND income < b`` (random public
  ranges whose ends are edges of the 1,024 bins, so every case answers the same question), beside DuckDB
  running the same counts.

Times are wall-clock seconds of a cold statement (fresh connection, planner caches cleared) and its CPU
seconds; accuracy is the mean absolute error of the released values against DuckDB's exact ones over
``--trials`` releases at ε = 1 (quantiles in income units; ranges in rows), and its ratio to the
1,024-bin answer's (below 1: more accurate). The previous run's figures (``results/fine_domains.csv``) are
printed beside each new one.

    python benchmarks/fine_domains.py [--rows 200000] [--trials 5]
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import duckdb  # noqa: E402
import numpy as np  # noqa: E402

import dpsql  # noqa: E402
from planner.caches import clear_caches  # noqa: E402
from results_io import previous_rows, print_table, write_csv  # noqa: E402

TOP = 500_000
FRACTIONS = [round(q / 100, 2) for q in range(1, 100)]
CASES = {  # name → the income column's declared domain
    "bins: 1,024": {"bins": [int(round(e)) for e in np.linspace(0, TOP + 1, 1025)]},
    "bins: 1,024 of width 489": {"bins": list(range(0, 1024 * 489 + 1, 489))},
    "range: [0, 500000]": {"range": [0, TOP]},
}
REFERENCE = "bins: 1,024"
QUANTILES_ONLY = {"bins: 1,024 of width 489"}  # the ranges' ends are the reference's edges: they would split its bins


def generate(database: duckdb.DuckDBPyConnection, rows: int, seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    incomes = np.clip(np.round(rng.lognormal(10.6, 0.8, rows)), 0, TOP).astype(np.int64)
    groups = rng.integers(0, 2, rows)
    database.execute("CREATE OR REPLACE TABLE t AS SELECT * FROM (SELECT unnest(?) AS income, unnest(?) AS g)", [incomes.tolist(), groups.tolist()])


def ranges(count: int = 100, seed: int = 3) -> list[tuple[int, int]]:
    """Random ranges ``[a, b)`` whose ends are edges of the 1,024 bins: every case can answer them exactly."""
    edges = CASES[REFERENCE]["bins"]
    rng = np.random.default_rng(seed)
    ends = np.sort(rng.choice(len(edges), size=(count, 2), replace=True), axis=1)
    return [(int(edges[a]), int(edges[b])) for a, b in ends if a < b]


def timed(action: Callable[[], object]) -> tuple[object, float, float]:
    started, cpu = time.perf_counter(), time.process_time()
    result = action()
    return result, time.perf_counter() - started, time.process_time() - cpu


def quantile_sql() -> str:
    return "SELECT " + ", ".join(f"PERCENTILE_CONT({q}) WITHIN GROUP (ORDER BY income)" for q in FRACTIONS) + " FROM t"


def range_sqls() -> list[str]:
    return [f"SELECT COUNT(*) FROM t WHERE income >= {a} AND income < {b}" for a, b in ranges()]


def dpsql_run(database: duckdb.DuckDBPyConnection, domain: dict, kind: str) -> tuple[np.ndarray, float, float]:
    """One cold release (fresh connection, planner caches cleared): its values, wall and CPU seconds."""
    clear_caches()
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e9), reuse=False)
    connection.register("t", None, schema={"privacy_unit": None, "columns": {"income": domain, "g": {"range": [0, 1]}}})
    if kind == "quantiles":
        run = lambda: np.array(connection.cursor().execute(quantile_sql(), epsilon=1.0).fetchall()[0], dtype=float)  # noqa: E731
    else:
        run = lambda: np.array([r.rows[0][0] for r in connection.workload(range_sqls(), epsilon=1.0)], dtype=float)  # noqa: E731
    values, wall, cpu = timed(run)
    connection.close()
    return values, wall, cpu  # type: ignore[return-value]


def duckdb_run(database: duckdb.DuckDBPyConnection, kind: str) -> tuple[np.ndarray, float]:
    if kind == "quantiles":
        sql = f"SELECT quantile_cont(income, {FRACTIONS}) FROM t"
        values, wall, _ = timed(lambda: np.array(database.execute(sql).fetchone()[0], dtype=float))
    else:
        values, wall, _ = timed(lambda: np.array([database.execute(s).fetchone()[0] for s in range_sqls()], dtype=float))
    return values, wall  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--trials", type=int, default=5)
    arguments = parser.parse_args()
    database = duckdb.connect()
    generate(database, arguments.rows)
    before = {(r["case"], r["question"]): r for r in previous_rows("fine_domains.csv")}
    records = []
    for kind, question in (("quantiles", "99 quantiles"), ("ranges", "100 ranges")):
        exact, duckdb_s = duckdb_run(database, kind)
        asked = []
        for case, domain in CASES.items():
            if kind == "ranges" and case in QUANTILES_ONLY:
                continue
            runs = [dpsql_run(database, domain, kind) for _ in range(arguments.trials)]
            asked.append({
                "case": case, "question": question,
                "dpsql_s": runs[0][1], "dpsql_cpu_s": runs[0][2], "duckdb_s": duckdb_s, "ratio": runs[0][1] / duckdb_s,
                "mean_abs_error": float(np.mean([np.mean(np.abs(values - exact)) for values, _, _ in runs])),
            })
        reference = next(r["mean_abs_error"] for r in asked if r["case"] == REFERENCE)
        records += [{**r, "error_vs_1024_bins": r["mean_abs_error"] / reference} for r in asked]
    for record in records:
        old = before.get((record["case"], record["question"]), {})
        record["previous_dpsql_s"] = old.get("dpsql_s", "")
        record["previous_error"] = old.get("mean_abs_error", "")
    print(f"{arguments.rows:,} rows; cold statements (fresh connection, planner caches cleared); ε = 1, {arguments.trials} trials; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    columns = ["case", "question", "dpsql_s", "dpsql_cpu_s", "duckdb_s", "ratio", "mean_abs_error", "error_vs_1024_bins", "previous_dpsql_s", "previous_error"]
    print_table(records, columns, lambda v: f"{v:.4g}" if isinstance(v, float) else ("—" if v == "" else str(v)))
    print(f"written to {write_csv('fine_domains.csv', records, columns)}")


if __name__ == "__main__":
    main()
