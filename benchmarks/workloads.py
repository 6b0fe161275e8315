"""Planned SQL workloads against the per-query baseline, on the real Adult data at total ε = 1 (pure DP).

Two workloads, each released as ONE dpsql statement/batch at ε = 1:

1. ``CUBE`` over four columns (workclass, education_num, race, sex): 16 grouping sets;
2. the batch of all 2-way marginals over five columns (workclass, education_num, marital_status,
   race, sex): 10 ``GROUP BY a, b`` statements through ``connection.workload``.

Baseline (what other DP SQL tools do): every grouping set / statement measured on its own with Laplace
noise at ε / (number of queries) and L1 sensitivity 1 (one row per person, each row in one cell), no
post-processing. Its expected mean absolute error per cell is the Laplace scale, (number of queries)/ε.

Both release every cell of the public domain of every grouping set. Reported per workload: the mean
absolute error per released cell of dpsql and of the baseline (averaged over TRIALS seeded releases),
the improvement factor, and how close dpsql's empirical mean squared error per cell comes to the
planner's predicted one (ratio 1 = exactly as predicted, with the standard error of that ratio over the
trials: a few high-variance subtotals dominate the CUBE's mean, so its ratio is the noisier one).
Beside the GLS answers, the same seeded measurements answered with ``non_negative=True`` (NNLS
post-processing, ``dpsql.nonnegative``): their mean absolute error per cell and improvement factor.
Every trial is a fresh measurement (``reuse=False``: kept measurements would pool the trials).

Run: ``/work/venv/bin/python benchmarks/workloads.py``; writes ``benchmarks/results/workloads.csv``.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

os.environ["DPSQL_TEST_HOOKS"] = "1"  # an evaluation: the exact answers and seeded releases use dpsql.testing's hooks

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import dpsql  # noqa: E402
import dpsql.testing  # noqa: E402
from dpsql import pipeline  # noqa: E402
from dpsql.request import Prepared  # noqa: E402
from dpsql.result import ResultSet  # noqa: E402
from dpsql.sql.statement import parse_statement  # noqa: E402
from peers.shared_table import read_table, sql_name  # noqa: E402
from results_io import print_table, write_csv  # noqa: E402

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
EPSILON, TRIALS, SEED = 1.0, 100, 20261122
CUBE_COLUMNS = ("workclass", "education_num", "race", "sex")
PAIR_COLUMNS = ("workclass", "education_num", "marital_status", "race", "sex")


def load_adult() -> tuple[pd.DataFrame, dict[str, object]]:
    frame = read_table(DATA / "adult.csv")
    sizes = {sql_name(k): v for k, v in json.loads((DATA / "adult-domain.json").read_text()).items()}
    schema = {"columns": {c: {"range": [0, sizes[c] - 1]} for c in (*PAIR_COLUMNS,)}}
    return frame, schema


def workloads() -> dict[str, list[str]]:
    cube = [f"SELECT {', '.join(CUBE_COLUMNS)}, COUNT(*) FROM adult GROUP BY CUBE ({', '.join(CUBE_COLUMNS)})"]
    pairs = [f"SELECT {a}, {b}, COUNT(*) FROM adult GROUP BY {a}, {b}" for a, b in itertools.combinations(PAIR_COLUMNS, 2)]
    return {"cube over 4 columns": cube, "all 2-way marginals over 5 columns": pairs}


def released_values(results: list[ResultSet]) -> np.ndarray:
    return np.concatenate([[row[-1] for row in result.rows] for result in results])


def baseline_error(exact: np.ndarray, queries: int, rng: np.random.Generator) -> float:
    """Per-query Laplace at ε / queries on each (sensitivity-1) marginal, no post-processing."""
    scale = queries / EPSILON
    return float(np.mean([np.abs(rng.laplace(0.0, scale, size=exact.size)).mean() for _ in range(TRIALS)]))


def query_count(statements: list[str]) -> int:
    return sum(len(parse_statement(s).branches) for s in statements)


def prepare(connection: dpsql.Connection, statements: list[str], non_negative: bool = False) -> Prepared:
    """The batch, prepared once (the pipeline's first stage): every trial releases the same plan."""
    session = connection._session
    return pipeline.prepare(session, pipeline.batch_request(session, statements, None, None, EPSILON, None, non_negative, False))


def run(connection: dpsql.Connection, prepared: Prepared) -> list[ResultSet]:
    return pipeline.release(connection._session, prepared)


def main() -> list[dict[str, object]]:
    frame, schema = load_adult()
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=EPSILON * (4 * TRIALS + 10)), reuse=False)
    connection.register("adult", frame, schema=schema)
    rng = np.random.default_rng(SEED)
    table = []
    for name, statements in workloads().items():
        started = time.perf_counter()
        prepared = prepare(connection, statements)
        planning_seconds = time.perf_counter() - started
        fitting = prepare(connection, statements, non_negative=True)
        with dpsql.testing.noise_disabled():
            exact = released_values(run(connection, prepared))
        predicted_variance = np.concatenate(prepared.plan.query_variances())
        absolute, squared, nonnegative_absolute = [], [], []
        for trial in range(TRIALS):
            with dpsql.testing.seeded(SEED + trial):
                noisy = released_values(run(connection, prepared))
            with dpsql.testing.seeded(SEED + trial):  # the same measurement, answered by NNLS
                fitted = released_values(run(connection, fitting))
            absolute.append(np.abs(noisy - exact).mean())
            squared.append(((noisy - exact) ** 2).mean())
            nonnegative_absolute.append(np.abs(fitted - exact).mean())
        queries = query_count(statements)
        baseline = baseline_error(exact, queries, rng)
        mean_absolute = float(np.mean(absolute))
        nonnegative_mean_absolute = float(np.mean(nonnegative_absolute))
        table.append(
            {
                "workload": name,
                "queries": queries,
                "cells": exact.size,
                "strategy": prepared.plan.strategy_name,
                "dpsql_mae_per_cell": round(mean_absolute, 3),
                "baseline_mae_per_cell": round(baseline, 3),
                "improvement": round(baseline / mean_absolute, 2),
                "dpsql_nonnegative_mae_per_cell": round(nonnegative_mean_absolute, 3),
                "nonnegative_improvement": round(baseline / nonnegative_mean_absolute, 2),
                "dpsql_mse_per_cell": round(float(np.mean(squared)), 3),
                "predicted_mse_per_cell": round(float(predicted_variance.mean()), 3),
                "empirical_over_predicted": round(float(np.mean(squared) / predicted_variance.mean()), 3),
                "ratio_standard_error": round(float(np.std(squared, ddof=1) / np.sqrt(TRIALS) / predicted_variance.mean()), 3),
                "planning_seconds": round(planning_seconds, 2),
            }
        )
    connection.close()
    return table


def report(table: list[dict[str, object]]) -> None:
    print_table(table, list(table[0]))
    write_csv("workloads.csv", table)


if __name__ == "__main__":
    report(main())
