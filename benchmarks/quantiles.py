"""Quantiles by group at ε = 1: dpsql's statement (a measured CDF per group, or an exponential mechanism) against its peers.

Tasks (one row per privacy unit; the ranked column's domain is an integer range declared from public
metadata, never from the data; group keys public, every declared category):

* PUMS_10k age deciles (0.1 … 0.9) by educ (16 groups), and the median of age by educ: age declared as the
  range [0, 100] (the bounds of smartnoise-sdk's ``PUMS_large.yaml``), educ as the categories 1..16;
* PUMS_10k age percentiles 10/50/90 and all 99 percentiles by sex (2 groups of about 5,000 rows);
* Adult hours-per-week deciles and median by workclass (9 groups): the column holds codes, declared as
  the range [0, 98] (``adult-domain.json``: 99 values), workclass as 0..8.

Methods, each releasing every fraction of every group at a total ε = 1 (pure DP, add/remove one row):

* dpsql: ``SELECT g, QUANTILE_CONT(v, 0.1) AS p10, …, QUANTILE_CONT(v, 0.9) AS p90 FROM t GROUP BY g`` (and
  ``MEDIAN(v)``) — one statement; the planner chooses before the read (the version column shows which,
  from EXPLAIN's ``mechanism`` row): one Identity ⊗ Prefix product (each group's CDF projected onto
  monotone non-negative CDFs and inverted), or permute-and-flip per group at 90 % of ε with the CDF at 10 %
  for the counts and the error bars (``dpsql.sql.quantile_paths``);
* identity histogram (the naive approach): one histogram of the column per group with Laplace noise at ε,
  its CDF from the cells with negative ones set to 0 ("clipped"), or projected as dpsql projects its own
  ("projected"), inverted with dpsql's rule — against dpsql, they show what the planner's strategy buys;
* OpenDP (its own environment with ``opendp[polars]``: ``DPSQL_PEER_PYTHON``): its Polars context,
  ``.dp.quantile(alpha, candidates)`` per fraction in one query, the candidates every integer of the range
  (``benchmarks/peers/opendp_quantiles.py``);
* Tumult Analytics (its own environment with ``tmlt.analytics``, which needs Java: ``DPSQL_TUMULT_PYTHON``):
  one ``groupby(KeySet).quantile(v, q, low, high)`` query per fraction at ε / fractions, one aggregate per
  query being all it offers (``benchmarks/peers/tumult_quantiles.py``). Spark makes it slow here (seconds
  per query on a shared 2-core machine), so it runs ``--tumult-trials`` trials (default 10), said in the table;
* SmartNoise SQL 1.0.10 is left out: its parser accepts ``PERCENTILE_CONT(col)`` but its rewriter refuses
  it ("We don't know how to rewrite aggregate function: PERCENTILE_CONT"), and it has no MEDIAN or
  ``WITHIN GROUP``.

Metrics, over groups (each group weighs the same), fractions and trials, against the group's true rows:

* ``rank_error``: mean |F_g(x) − q| with F_g(x) the fraction of the group's rows ≤ the released value x;
* ``tie_rank_error``: mean distance from q to [F_g(x⁻), F_g(x)] (the fraction of rows < x and ≤ x), which
  is 0 whenever x is a true q-quantile of data with ties (``rank_error`` is not: on Adult, where 47 % of
  rows hold one hours code, the exact answer itself is far from q in ``rank_error``);
* ``value_error``: mean |x − the exact PERCENTILE_CONT(q)| in the column's units.

A missing answer (a NULL, or a group a method did not return) counts as the range's midpoint, and the
table says how many there were. The row "exact answer" is the exact PERCENTILE_CONT (what dpsql returns
with noise off, checked): the floor of ``tie_rank_error`` and ``value_error``. ``rank_error`` has no such
floor under ties: a value off the true quantile can score below the exact answer (OpenDP and Tumult do,
on Adult's large groups, where dpsql's answers are exact to within 0.0002 in ``tie_rank_error``).

``coverage_95`` (dpsql only): the share of its 95 % intervals (``cursor.confidence_interval``) holding the
exact PERCENTILE_CONT.

Measured (``results/quantiles.csv``, 100 trials, Tumult 10; OpenDP 0.16.0, Tumult Analytics 0.21.0 on
tmlt.core 0.19.1 and PySpark 3.5.9; at f109ecf), tie-aware rank error: the medians go to permute-and-flip —
PUMS 0.0003 against 0.0005 (OpenDP, 1.5×) and 0.0062 (Tumult); Adult 0.026 against 0.027 (OpenDP) and 0.131
(Tumult): its groups of 21 and 10 rows dominate every mean and no method ranks them well. The other tasks stay
on the CDF — PUMS deciles 0.0077 against 0.035 (OpenDP, 4.5×) and 0.043 (Tumult); 10/50/90 by sex 0.0001
against 0.0006 (OpenDP, 7.3×); 99 percentiles by sex 0.0001 against 0.022 (OpenDP); Adult deciles 0.041
against 0.083 (OpenDP, 2.0×) and 0.14 (Tumult, whose answers are never exactly a data value, so its tie-aware
error is its rank error). In plain rank error the ties dominate Adult: the exact answer itself scores 0.120 on
its deciles. Coverage of dpsql's 95 % intervals: 98.0–99.9 % on the CDF path (many rows share each value:
docs/math.md §13; 96.6 % on the test's less tied data), 99.1–100 % on the exponential path (its band comes from
a CDF measured at a tenth of ε: conservative). Against the naive histogram, the strategy's gain is 1.5× on PUMS
deciles (tie-aware); on Adult deciles the two are level, the small groups' error being the projection's to win,
not the strategy's.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/quantiles.py [--trials 100] [--tumult-trials 10] [--csv quantiles.csv]
    # peers, each in its own environment (never dpsql dependencies):
    #   python3 -m venv /tmp/peers && /tmp/peers/bin/pip install "opendp[polars]" pandas    -> DPSQL_PEER_PYTHON
    #   python3 -m venv /tmp/tumult && /tmp/tumult/bin/pip install tmlt.analytics pandas   -> DPSQL_TUMULT_PYTHON
    # the data: DPSQL_BENCH_DATA (default: the shared/ folder beside the repository)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

import dpsql
from dpsql.schema import ColumnDomain
from dpsql.sql import quantiles
from dpsql.sql.parse import Quantile
from dpsql_runs import released_runs
from peers.shared_table import read_table
from results_io import number_text, print_table, write_csv

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("DPSQL_BENCH_DATA", HERE.parent.parent / "shared" / "data"))  # the repository sits beside shared/
EPSILON = 1.0
DECILES = tuple(round(0.1 * k, 1) for k in range(1, 10))
MAX_TUMULT_QUERIES = 9  # Tumult answers one quantile per Spark query (seconds each): the 99-percentile task skips it


@dataclass(frozen=True)
class Task:
    name: str
    file: str
    group: str
    categories: tuple[int, ...]
    column: str
    low: int
    high: int
    fractions: tuple[float, ...]

    def frame(self) -> pd.DataFrame:
        return read_table(DATA / self.file, [self.group, self.column])

    def sql(self) -> str:
        if self.fractions == (0.5,):
            return f"SELECT {self.group}, MEDIAN({self.column}) AS p50 FROM t GROUP BY {self.group}"
        items = ", ".join(f"QUANTILE_CONT({self.column}, {q}) AS p{round(100 * q)}" for q in self.fractions)
        return f"SELECT {self.group}, {items} FROM t GROUP BY {self.group}"


PUMS = dict(file="PUMS_10k.csv", group="educ", categories=tuple(range(1, 17)), column="age", low=0, high=100)
ADULT = dict(file="adult.csv", group="workclass", categories=tuple(range(9)), column="hours_per_week", low=0, high=98)
PUMS_BY_SEX = dict(PUMS, group="sex", categories=(0, 1))
PERCENTILES = tuple(round(0.01 * k, 2) for k in range(1, 100))
TASKS = (
    Task("PUMS_10k age deciles by educ", fractions=DECILES, **PUMS),  # type: ignore[arg-type]
    Task("PUMS_10k age median by educ", fractions=(0.5,), **PUMS),  # type: ignore[arg-type]
    Task("PUMS_10k age 10/50/90 by sex", fractions=(0.1, 0.5, 0.9), **PUMS_BY_SEX),  # type: ignore[arg-type]
    Task("PUMS_10k age 99 percentiles by sex", fractions=PERCENTILES, **PUMS_BY_SEX),  # type: ignore[arg-type]
    Task("Adult hours-per-week deciles by workclass", fractions=DECILES, **ADULT),  # type: ignore[arg-type]
    Task("Adult hours-per-week median by workclass", fractions=(0.5,), **ADULT),  # type: ignore[arg-type]
)

Release = dict[int, list[float | None]]  # group -> one value per fraction (None: not answered)
Intervals = dict[int, list[tuple[float, float] | None]]  # group -> one 95 % interval per fraction


def dpsql_trials(task: Task, data: pd.DataFrame, trials: int) -> tuple[list[Release], list[Intervals]]:
    """dpsql's releases and their 95 % intervals (``cursor.confidence_interval``), one statement per trial."""
    schema = {
        "privacy_unit": None,
        "columns": {task.group: {"categories": list(task.categories)}, task.column: {"range": [task.low, task.high]}},
    }
    released, intervals = [], []
    for rows, bands in released_runs(data, schema, task.sql(), trials, EPSILON):
        released.append({int(key): list(values) for key, *values in rows})
        intervals.append({int(key): list(band) for (key, *_), (_, *band) in zip(rows, bands)})
    return released, intervals


def dpsql_path(task: Task, data: pd.DataFrame) -> str:
    """How dpsql answers the task (EXPLAIN's ``mechanism`` row: the exponential mechanism or the CDF)."""
    schema = {
        "privacy_unit": None,
        "columns": {task.group: {"categories": list(task.categories)}, task.column: {"range": [task.low, task.high]}},
    }
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=EPSILON))
    connection.register("t", data, schema=schema)
    rows = connection.cursor().execute("EXPLAIN " + task.sql(), epsilon=EPSILON).fetchall()
    connection.close()
    found = [r[3] for r in rows if r[0] == "mechanism"]
    return found[0].split(";")[0] if found else "CDF (no exponential candidate)"


def histogram_trials(task: Task, data: pd.DataFrame, trials: int, rng: np.random.Generator, clip: bool) -> list[Release]:
    """One Laplace histogram of the column per group at ε (a row is in one cell of one group: sensitivity 1),
    its CDF either from the cells with negative ones set to 0 (``clip``) or projected as dpsql projects its
    own (``quantiles.monotone``, weights 1/Var F(k) = 1/(2(k+1)/ε²)), then inverted with dpsql's rule."""
    domain = ColumnDomain(task.column, "range", (task.low, task.high))
    cells = task.high - task.low + 1
    exact = np.zeros((len(task.categories), cells))
    for row, key in enumerate(task.categories):
        values = data.loc[data[task.group] == key, task.column].to_numpy()
        exact[row] = np.bincount(values - task.low, minlength=cells)
    variances = np.broadcast_to(2.0 * np.arange(1, cells + 1) / EPSILON**2, exact.shape)
    items = [Quantile(f"p{q}", "PERCENTILE_CONT", task.column, q) for q in task.fractions]
    released = []
    for _ in range(trials):
        noisy = exact + rng.laplace(0.0, 1.0 / EPSILON, exact.shape)
        cdf = np.cumsum(np.maximum(noisy, 0.0), axis=1) if clip else quantiles.monotone(np.cumsum(noisy, axis=1), variances)
        answers = [quantiles.released(item, domain, cdf, variances)[0] for item in items]
        released.append({key: [answers[i][row] for i in range(len(items))] for row, key in enumerate(task.categories)})
    return released


PEERS = {
    "OpenDP": ("DPSQL_PEER_PYTHON", "opendp_quantiles.py"),
    "Tumult Analytics": ("DPSQL_TUMULT_PYTHON", "tumult_quantiles.py"),
}


def peer_trials(peer: str, task: Task, trials: int) -> tuple[list[Release], str] | None:
    """A peer's releases and versions from its own environment, or None with a printed note."""
    variable, script_name = PEERS[peer]
    python = os.environ.get(variable)
    if not python:
        print(f"  ({peer} skipped for {task.name}: set {variable})", file=sys.stderr)
        return None
    request = {
        "data": str(DATA / task.file), "groups": [task.group], "categories": {task.group: list(task.categories)},
        "column": task.column, "bounds": [task.low, task.high], "quantiles": list(task.fractions),
        "epsilon": EPSILON, "trials": trials,
    }
    done = subprocess.run([python, str(HERE / "peers" / script_name)], input=json.dumps(request), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{peer} failed on {task.name}:\n{done.stderr[-3000:]}")
    versions = done.stderr.strip().splitlines()[-1]
    print(f"  {task.name}: {versions}", file=sys.stderr)
    return [{int(key): list(values) for key, *values in rows} for rows in json.loads(done.stdout)], versions


def errors(task: Task, data: pd.DataFrame, released: list[Release]) -> dict[str, float]:
    """The module doc's three mean errors over groups, fractions and trials, and the missing answers."""
    midpoint = (task.low + task.high) / 2
    rank, tie_rank, value, missing = [], [], [], 0
    for key in task.categories:
        rows = np.sort(data.loc[data[task.group] == key, task.column].to_numpy(dtype=float))
        if rows.size == 0:
            continue
        for i, q in enumerate(task.fractions):
            exact = float(np.quantile(rows, q))  # linear interpolation: PERCENTILE_CONT
            answers = np.array([_answer(release.get(key), i) for release in released], dtype=float)
            missing += int(np.isnan(answers).sum())
            answers = np.where(np.isnan(answers), midpoint, answers)
            at_most = np.searchsorted(rows, answers, side="right") / rows.size
            below = np.searchsorted(rows, answers, side="left") / rows.size
            rank.append(np.abs(at_most - q))
            tie_rank.append(np.maximum(np.maximum(below - q, q - at_most), 0.0))
            value.append(np.abs(answers - exact))
    return {
        "rank_error": float(np.mean(np.concatenate(rank))), "tie_rank_error": float(np.mean(np.concatenate(tie_rank))),
        "value_error": float(np.mean(np.concatenate(value))), "missing": missing,
    }


def coverage(task: Task, data: pd.DataFrame, intervals: list[Intervals]) -> float:
    """The share of released 95 % intervals (value ± 1.96·error) holding the exact PERCENTILE_CONT."""
    exact = exact_release(task, data)
    covered = [
        band is not None and band[0] - 1e-9 <= exact[key][i] <= band[1] + 1e-9
        for trial in intervals for key, bands in trial.items() if key in exact for i, band in enumerate(bands)
    ]
    return float(np.mean(covered))


def _answer(values: list[float | None] | None, index: int) -> float:
    return float("nan") if values is None or values[index] is None else float(values[index])


def exact_release(task: Task, data: pd.DataFrame) -> Release:
    grouped = data.groupby(task.group)[task.column]
    return {int(key): [float(np.quantile(rows, q)) for q in task.fractions] for key, rows in grouped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--tumult-trials", type=int, default=10, help="Tumult's Spark queries take seconds each")
    parser.add_argument("--seed", type=int, default=0, help="for the in-script baselines only (dpsql's noise is from OS entropy)")
    parser.add_argument("--csv", default="quantiles.csv")
    parser.add_argument("--tasks", nargs="*", default=[""], help="only the tasks whose names contain one of these words")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = []
    for task in (t for t in TASKS if any(word in t.name for word in args.tasks)):
        data = task.frame()
        dpsql_released, dpsql_intervals = dpsql_trials(task, data, args.trials)
        methods: dict[str, tuple[list[Release], str]] = {
            "exact answer (floor)": ([exact_release(task, data)], "-"),
            "dpsql": (dpsql_released, f"dpsql {dpsql.__version__}: {dpsql_path(task, data)}"),
            "identity histogram, clipped": (histogram_trials(task, data, args.trials, rng, clip=True), "-"),
            "identity histogram, projected": (histogram_trials(task, data, args.trials, rng, clip=False), "-"),
        }
        for peer in PEERS:
            if peer == "Tumult Analytics" and len(task.fractions) > MAX_TUMULT_QUERIES:
                print(f"  (Tumult skipped for {task.name}: {len(task.fractions)} Spark queries per trial)", file=sys.stderr)
                continue
            got = peer_trials(peer, task, args.tumult_trials if peer == "Tumult Analytics" else args.trials)
            if got is not None:
                methods[peer] = got
        measured = {name: errors(task, data, released) for name, (released, _) in methods.items()}
        for name, (released, version) in methods.items():
            rows.append({
                "task": task.name, "method": name, "version": version, "groups": len(task.categories), "trials": len(released),
                "epsilon": EPSILON, **measured[name], "tie_rank_error_vs_dpsql": measured[name]["tie_rank_error"] / measured["dpsql"]["tie_rank_error"],
                "coverage_95": coverage(task, data, dpsql_intervals) if name == "dpsql" else "",
            })
    columns = [
        "task", "method", "version", "groups", "trials", "epsilon", "rank_error", "tie_rank_error", "value_error", "missing",
        "tie_rank_error_vs_dpsql", "coverage_95",
    ]
    print_table(rows, columns, number_text)
    print(f"written to {write_csv(args.csv, rows, columns)}")


if __name__ == "__main__":
    main()
