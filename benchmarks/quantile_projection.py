"""Projecting the noisy CDF before inverting it: dpsql's quantiles with and without ``quantiles.monotone``.

An ablation, paired: every statement is answered once; the CDF block dpsql measured is kept before its
projection, and the same quantiles are inverted from it raw (the least-squares CDF as it is) and projected
(what dpsql releases: the weighted isotonic, non-negative fit, docs/math.md §13). Both inversions see the
same noise, so the difference is the projection's alone.

Data: synthetic groups of 10, 30, 100, 300 and 1,000 rows (one of each) in five shapes — ``packed`` (three
values), ``normal``, ``uniform``, ``spike`` (60 % on one value) and ``skew`` (exponential) — over integer
ranges of 100 and 256 cells; and the two real tasks of ``benchmarks/quantiles.py`` (PUMS_10k age by educ,
Adult hours-per-week by workclass) when their files are found. Deciles and medians, ε = 1, pure DP.

Metric: the tie-aware rank error of ``benchmarks/quantiles.py`` (the distance from q to the released value's
rank interval), in rows for the synthetic groups (one column per group size) and as a fraction for the real
tasks (mean over groups); an unanswered quantile (a group whose noisy total rounds to ≤ 0) counts as the
range's midpoint.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/quantile_projection.py [--trials 30] [--csv quantile_projection.csv]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
import pandas as pd
from quantiles import DECILES, TASKS, Release, Task, dpsql_trials, errors
from results_io import number_text, print_table, write_csv

from dpsql.schema import ColumnDomain
from dpsql.sql import quantiles
from dpsql.sql.parse import Quantile

SIZES = (10, 30, 100, 300, 1000)
SHAPES = ("packed", "normal", "uniform", "spike", "skew")


def synthetic(shape: str, size: int, high: int, rng: np.random.Generator) -> np.ndarray:
    if shape == "packed":
        return rng.choice([high // 3, high // 3 + 2, high // 2 + 5], size)
    if shape == "normal":
        return np.clip(np.round(rng.normal(high / 2, high / 10, size)), 0, high).astype(int)
    if shape == "uniform":
        return rng.integers(0, high + 1, size)
    if shape == "spike":
        return np.where(rng.random(size) < 0.6, high * 2 // 5, rng.integers(0, high + 1, size))
    return np.clip(np.round(rng.exponential(high / 8, size)), 0, high).astype(int)


def paired_trials(task: Task, data: pd.DataFrame, trials: int) -> dict[str, list[Release]]:
    """dpsql's releases (projected) and the same statements' quantiles inverted from the raw CDF."""
    raw_blocks: list[tuple[np.ndarray, np.ndarray]] = []
    project = quantiles.monotone

    def keeping_the_raw_block(values: np.ndarray, variances: np.ndarray) -> np.ndarray:
        raw_blocks.append((np.array(values, dtype=float), np.array(variances, dtype=float)))
        return project(values, variances)

    quantiles.monotone = keeping_the_raw_block  # type: ignore[assignment]
    try:
        projected, _ = dpsql_trials(task, data, trials)
    finally:
        quantiles.monotone = project  # type: ignore[assignment]
    domain = ColumnDomain(task.column, "range", (task.low, task.high))
    items = [Quantile(f"p{q}", "PERCENTILE_CONT", task.column, q) for q in task.fractions]
    raw = []
    for values, variances in raw_blocks:
        answers = [quantiles.released(item, domain, values, variances)[0] for item in items]
        raw.append({key: [answers[i][row] for i in range(len(items))] for row, key in enumerate(task.categories)})
    return {"raw": raw, "projected": projected}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=5, help="the synthetic data (dpsql's noise is from OS entropy)")
    parser.add_argument("--csv", default="quantile_projection.csv")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = []
    for high in (99, 255):
        for shape in SHAPES:
            data = pd.concat([pd.DataFrame({"g": i, "v": synthetic(shape, n, high, rng)}) for i, n in enumerate(SIZES)], ignore_index=True)
            for fractions, label in ((DECILES, "deciles"), ((0.5,), "median")):
                task = Task(f"{shape}, {high + 1} cells, {label}", "-", "g", tuple(range(len(SIZES))), "v", 0, high, fractions)
                released = paired_trials(task, data, args.trials)
                row: dict[str, object] = {"task": task.name}
                for variant, releases in released.items():
                    for i, size in enumerate(SIZES):
                        one = replace(task, categories=(i,))
                        row[f"{variant} n={size}"] = errors(one, data, [{i: r[i]} for r in releases])["tie_rank_error"] * size
                rows.append(row)
    for task in (t for t in TASKS if t.fractions == DECILES):
        try:
            data = task.frame()
        except FileNotFoundError:
            continue
        released = paired_trials(task, data, args.trials)
        rows.append({"task": task.name, **{f"{v} (fraction)": errors(task, data, r)["tie_rank_error"] for v, r in released.items()}})
    columns = list(dict.fromkeys(k for row in rows for k in row))
    for row in rows:
        for column in columns:
            row.setdefault(column, "")
    print_table(rows, columns, number_text)
    synthetic_cells = [(row[f"raw n={n}"], row[f"projected n={n}"]) for row in rows if f"raw n={SIZES[0]}" in row and row[f"raw n={SIZES[0]}"] != "" for n in SIZES]
    lower = sum(p < r for r, p in synthetic_cells)
    equal = sum(p == r for r, p in synthetic_cells)
    total_raw, total_projected = sum(r for r, _ in synthetic_cells), sum(p for _, p in synthetic_cells)
    print(
        f"synthetic: projected lower in {lower} of {len(synthetic_cells)} cells, equal in {equal}, higher in "
        f"{len(synthetic_cells) - lower - equal}; summed rank error {total_projected:.1f} vs {total_raw:.1f} rows raw "
        f"({1 - total_projected / total_raw:.0%} lower)"
    )
    print(f"written to {write_csv(args.csv, rows, columns)}")


if __name__ == "__main__":
    main()
