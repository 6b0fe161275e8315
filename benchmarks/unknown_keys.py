"""GROUP BY on an unknown column: the split between key selection and counting (dpsql.keys).

Keys hold Zipf-distributed numbers of units (one row per unit and key, so a key's count is its
number of units). For every candidate design — each selection fraction of the grid with the
optimal primitive and discrete-Laplace counting, and Laplace thresholding whose noisy count is
released — the table shows, over seeded trials: keys released, and the empirical total squared
error over ALL keys of the data (a dropped key errs by its whole count, a kept key by its noise),
beside the design's minimax objective ``max_n π(n)V + (1 − π(n))n²``. ``*`` marks the design
``dpsql.keys.design`` picks, ``+`` the one it picks when the noisy count may not be re-used (r > 1 or a
mixed GROUP BY). End-to-end timing of one statement through DuckDB closes the table.

    /work/venv/bin/python benchmarks/unknown_keys.py     # prints the table, writes results/unknown_keys.csv
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

import dpsql
import planner
from dpsql import keys
from planner.noise import discrete_laplace
from planner.partition import laplace_threshold, optimal
from results_io import write_csv

KEYS, UNITS, TRIALS, DELTA = 5000, 200_000, 40, 1e-6
BOUNDS = keys.KeyBounds(max_groups_per_unit=1, max_rows_per_group=1, max_rows_per_unit=1)


def zipf_counts(rng: np.random.Generator) -> np.ndarray:
    """Units per key: UNITS units spread over KEYS keys with Zipf(1.1) popularity (keys with 0 units dropped)."""
    weights = 1.0 / np.arange(1, KEYS + 1) ** 1.1
    counts = rng.multinomial(UNITS, weights / weights.sum())
    return counts[counts > 0]


def empirical(design: keys.SelectionDesign, counts: np.ndarray, epsilon: float, rng: np.random.Generator) -> tuple[float, float]:
    """Mean keys released and mean total squared error over TRIALS selections."""
    released, errors = [], []
    for _ in range(TRIALS):
        mask, noisy = design.primitive.keep(counts, rng=rng)
        if design.reuses_noisy_count:
            estimate = noisy
        else:
            scale = BOUNDS.contributions / (epsilon * (1 - design.fraction))
            estimate = counts + discrete_laplace(scale, size=counts.shape, rng=rng)
        error = np.where(mask, (estimate - counts).astype(float) ** 2, counts.astype(float) ** 2)
        released.append(mask.sum())
        errors.append(error.sum())
    return float(np.mean(released)), float(np.mean(errors))


def candidates(epsilon: float) -> list[keys.SelectionDesign]:
    found = []
    for fraction in keys.SELECTION_FRACTIONS:
        primitive = optimal(epsilon * fraction, DELTA)
        privacy = planner.Privacy.laplace(epsilon * (1 - fraction))
        variance = keys._count_variance(privacy, BOUNDS.contributions)
        found.append(keys.SelectionDesign(primitive, fraction, privacy, variance, keys.worst_key_error(primitive, variance)))
    thresholding = laplace_threshold(epsilon, DELTA)
    variance = keys._count_variance(planner.Privacy.laplace(epsilon), BOUNDS.contributions)
    found.append(keys.SelectionDesign(thresholding, 1.0, None, variance, keys.worst_key_error(thresholding, None)))
    return found


def timing() -> tuple[int, float]:
    """Seconds for one SELECT key, COUNT(*) … GROUP BY key over 1M rows (100k units) through DuckDB."""
    rng = np.random.default_rng(1)
    units = np.repeat(np.arange(100_000), 10)
    frame = pd.DataFrame({"unit": units, "key": rng.zipf(1.3, size=units.size).astype(np.int64) % 20_000})
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10, delta=1e-5))
    connection.register("t", frame, schema={"privacy_unit": "unit", "max_rows_per_unit": 10, "max_groups_per_unit": 3,
                                           "max_rows_per_group": 1, "columns": {"key": "unknown"}})
    started = time.perf_counter()
    released = connection.cursor().execute("SELECT key, COUNT(*) FROM t GROUP BY key", epsilon=1.0).rowcount
    return released, time.perf_counter() - started


def main() -> None:
    rng = np.random.default_rng(0)
    counts = zipf_counts(rng)
    rows = []
    print(f"{counts.size} keys with units (of {KEYS}), {UNITS} units, delta = {DELTA:g}, {TRIALS} trials each")
    print(f"{'epsilon':>7} {'design':<34} {'released':>9} {'total sq. error':>16} {'minimax objective':>18}")
    for epsilon in (0.5, 1.0, 2.0):
        chosen = keys.design("laplace", epsilon, DELTA, BOUNDS, True)
        measured = keys.design("laplace", epsilon, DELTA, BOUNDS, False)
        for candidate in candidates(epsilon):
            released, error = empirical(candidate, counts, epsilon, rng)
            label = f"{candidate.primitive.name}, f = {candidate.fraction:.2f}"
            picked = (candidate.primitive.name, candidate.fraction)
            mark = "*" if picked == (chosen.primitive.name, chosen.fraction) else "+" if picked == (measured.primitive.name, measured.fraction) else " "
            print(f"{epsilon:7.2f} {label:<33}{mark} {released:9.1f} {error:16.4g} {candidate.objective:18.4g}")
            rows.append({"epsilon": epsilon, "primitive": candidate.primitive.name, "fraction": candidate.fraction,
                         "chosen": mark == "*", "chosen_without_reuse": mark == "+", "released": released, "total_squared_error": error,
                         "objective": candidate.objective})
    released, seconds = timing()
    print(f"\nend to end (DuckDB, 1M rows, 100k units, k = 3): {released} keys released in {seconds:.2f} s")
    write_csv("unknown_keys.csv", rows)


if __name__ == "__main__":
    main()
