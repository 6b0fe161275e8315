"""How accurate can ``SUM(v) … GROUP BY CUBE (a, b)`` be over all its cells while every grouping set stays at
least as accurate as one query per set at ε/S? dpsql's plan beside the best plan of each family, in one run.

The CUBE of ``--sizes 16 2`` (PUMS_10k's ``educ`` and ``sex``) has four grouping sets and 51 cells. A tool that
answers one GROUP BY per query spends ε/4 on each set: Laplace noise of scale 4·U/ε on every cell (U the sum's
bound), standard error √2·4·U/ε. Every figure below is a standard error in units of U/ε, from the plan alone (no
data is read: errors are properties of the plan), for:

* ``per set at ε/4`` — the peers' rule (OpenDP, SmartNoise SQL, Tumult answering each set as its own query);
* ``dpsql`` — the standard errors dpsql reports (``cursor.errors``) for the statement over a table of one row,
  noise on; its plan keeps each set's mean variance within 0.9·π/4 of the set's own plan at ε/4 (README);
* ``best marginals`` — the least mean standard error over all 51 cells of any plan measuring the four
  marginals with Laplace noise at shares of ε (Nelder–Mead over the shares), subject to every set's mean
  standard error ≤ ``--margin`` × the per-set rule's. The default margin, √(π/4) = 0.886, is parity in mean
  absolute error: the rule's error is one Laplace term (MAE = 0.707 σ), a least-squares combination of many is
  close to normal (MAE = 0.798 σ); ``--margin 1`` is parity in standard error;
* ``best p-identity, p = …`` — the same over strategies ``[I; Θ]`` with ``p`` free rows ``Θ ≥ 0`` and unit L1
  column norms (the p-Identity family of McKenna, Miklau, Hay and Machanavajjhala, "Optimizing error of high-
  dimensional statistical queries under differential privacy"), L-BFGS-B from ``--starts`` random starts, the
  constraint as a penalty.

The last two are searches, so they bound the frontier from below only where they converge; their figures show
how far the all-cells ratio can move while no set loses to the per-set rule.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/cube_sum_frontier.py [--sizes 16 2] [--starts 3]
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import minimize

import dpsql
from results_io import print_table, write_csv

EPSILON = 1.0
BOUND = 1000  # U: the sum's bound (figures are in units of U/ε, so any U gives the same table)


def grouping_sets(columns: int) -> list[tuple[int, ...]]:
    """Every subset of the columns, finest first (a CUBE's grouping sets)."""
    return [kept for size in range(columns, -1, -1) for kept in itertools.combinations(range(columns), size)]


def set_queries(sizes: Sequence[int]) -> dict[tuple[int, ...], np.ndarray]:
    """Each grouping set's cells as 0/1 rows over the finest cells."""
    cells = list(itertools.product(*(range(s) for s in sizes)))
    queries = {}
    for kept in grouping_sets(len(sizes)):
        keys = list(itertools.product(*(range(sizes[i]) for i in kept)))
        queries[kept] = np.array([[float(all(cell[i] == key[j] for j, i in enumerate(kept))) for cell in cells] for key in keys])
    return queries


def standard_errors(strategy: np.ndarray, scales: np.ndarray, queries: dict[tuple[int, ...], np.ndarray]) -> dict[tuple[int, ...], np.ndarray]:
    """Each set's cells' standard errors when the rows of ``strategy`` get Laplace noise of the given scales and
    the cells are their least-squares (GLS) estimate."""
    weights = 1.0 / (2.0 * scales**2)
    covariance = np.linalg.inv(strategy.T @ (strategy * weights[:, None]))
    return {kept: np.sqrt(np.einsum("ij,jk,ik->i", q, covariance, q)) for kept, q in queries.items()}


def mean_over_cells(errors: dict[tuple[int, ...], np.ndarray]) -> float:
    return float(np.mean(np.concatenate(list(errors.values()))))


def penalised(errors: dict[tuple[int, ...], np.ndarray], limit: float) -> float:
    """The all-cells mean standard error plus a steep penalty for any set whose mean exceeds ``limit``."""
    excess = sum(max(0.0, float(np.mean(e)) / limit - 1.0) ** 2 for e in errors.values())
    return mean_over_cells(errors) + 1e3 * excess


def best_marginal_plan(queries: dict[tuple[int, ...], np.ndarray], limit: float) -> dict[tuple[int, ...], np.ndarray]:
    """The least all-cells mean standard error over budget shares of the marginals (the finest always measured)."""
    sets = list(queries)
    strategy = np.vstack([queries[s] for s in sets])

    def errors_at(z: np.ndarray) -> dict[tuple[int, ...], np.ndarray]:
        shares = np.exp(z) / np.exp(z).sum()
        scales = np.concatenate([np.full(len(queries[s]), 1.0 / max(share, 1e-12)) for s, share in zip(sets, shares)])
        return standard_errors(strategy, scales, queries)

    found = min(
        (minimize(lambda z: penalised(errors_at(z), limit), start, method="Nelder-Mead", options={"maxiter": 4000, "fatol": 1e-10})
         for start in (np.zeros(len(sets)), np.array([2.0] + [0.0] * (len(sets) - 1)))),
        key=lambda result: result.fun,
    )
    return errors_at(found.x)


def best_p_identity(queries: dict[tuple[int, ...], np.ndarray], limit: float, rows: int, starts: int, seed: int) -> dict[tuple[int, ...], np.ndarray]:
    """The least all-cells mean standard error over strategies ``[I; Θ]`` with unit L1 column norms (module doc)."""
    cells = next(iter(queries.values())).shape[1]

    def errors_at(theta: np.ndarray) -> dict[tuple[int, ...], np.ndarray]:
        strategy = np.vstack([np.eye(cells), np.abs(theta.reshape(rows, cells))])
        strategy = strategy / strategy.sum(axis=0)
        return standard_errors(strategy, np.ones(len(strategy)), queries)

    rng = np.random.default_rng(seed)
    found = min(
        (minimize(lambda t: penalised(errors_at(t), limit), rng.random(rows * cells), method="L-BFGS-B", options={"maxiter": 3000})
         for _ in range(starts)),
        key=lambda result: result.fun,
    )
    return errors_at(found.x)


def dpsql_errors(sizes: Sequence[int]) -> dict[tuple[int, ...], np.ndarray]:
    """The standard errors dpsql reports for the CUBE statement (plan-only figures; one row of data)."""
    names = [f"c{i}" for i in range(len(sizes))]
    frame = pd.DataFrame({**{n: [0] for n in names}, "v": [0]})
    schema = {"privacy_unit": None, "columns": {**{n: {"categories": list(range(s))} for n, s in zip(names, sizes)}, "v": {"bounds": [0, BOUND]}}}
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10 * EPSILON))
    connection.register("t", frame, schema=schema)
    cursor = connection.cursor()
    cursor.execute(f"SELECT {', '.join(names)}, SUM(v) FROM t GROUP BY CUBE ({', '.join(names)})", epsilon=EPSILON)
    found: dict[tuple[int, ...], list[float]] = {}
    for row, errors in zip(cursor.fetchall(), cursor.errors):
        kept = tuple(i for i, value in enumerate(row[: len(sizes)]) if value is not None)
        found.setdefault(kept, []).append(float(errors[-1]) * EPSILON / BOUND)
    connection.close()
    return {kept: np.array(values) for kept, values in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 2], help="the CUBE's columns' numbers of categories")
    parser.add_argument("--starts", type=int, default=3, help="random starts of each p-identity search")
    parser.add_argument("--rows", type=int, nargs="*", default=[1, 2, 4], help="the p of the p-identity searches")
    parser.add_argument("--margin", type=float, default=float(np.sqrt(np.pi / 4)), help="each set's standard error at most this × the per-set rule's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", default="cube_sum_frontier.csv")
    arguments = parser.parse_args()
    queries = set_queries(arguments.sizes)
    sets = len(queries)
    per_set = np.sqrt(2.0) * sets  # Laplace of scale S·U/ε on every cell, in units of U/ε
    plans = {
        f"per set at ε/{sets}": {kept: np.full(len(q), per_set) for kept, q in queries.items()},
        "dpsql": dpsql_errors(arguments.sizes),
        "best marginals": best_marginal_plan(queries, arguments.margin * per_set),
        **{f"best p-identity, p = {p}": best_p_identity(queries, arguments.margin * per_set, p, arguments.starts, arguments.seed) for p in arguments.rows},
    }
    label = {kept: "(" + ", ".join(f"c{i}" for i in kept) + ")" for kept in queries}
    rows = []
    for name, errors in plans.items():
        row: dict[str, object] = {"plan": name, "all cells": per_set / mean_over_cells(errors)}
        row.update({label[kept]: per_set / float(np.mean(errors[kept])) for kept in queries})
        rows.append(row)
    print(f"CUBE over categories {arguments.sizes} ({sum(len(q) for q in queries.values())} cells), ε = {EPSILON}, searches with "
          f"every set within {arguments.margin:.3f}× the rule's standard error: the per-set rule's standard error over each "
          "plan's (mean over the cells; > 1 is better than the rule)")
    columns = ["plan", "all cells", *label.values()]
    print_table(rows, columns, lambda v: f"{v:.2f}×" if isinstance(v, float) else str(v))
    write_csv(arguments.csv, rows, columns)


if __name__ == "__main__":
    main()
