"""Partition selection: midpoints of the three primitives and the share of keys each releases.

For ε ∈ {0.1, 1, 5} and δ ∈ {1e-5, 1e-8} (one partition per unit) it prints the midpoint (n where
P[keep] = 1/2) of the optimal primitive, discrete-Laplace and discrete-Gaussian thresholding, next
to reference midpoints measured from another library's optimal implementation, and the fraction
of keys released on a Zipf(1) key distribution with 10⁶ rows (one unit each) over 10⁵ keys, both
expected (mean of π over the keys present) and sampled once with a fixed seed. A second table
shows what ``choose`` picks when a unit may touch k partitions (ε = 1, δ = 1e-5).

Run: ``/work/venv/bin/python benchmarks/partition_selection.py``; writes
``benchmarks/results/partition_selection.csv`` and ``partition_selection.png``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from planner.partition import PartitionSelection, choose, gaussian_threshold, laplace_threshold, optimal
from results_io import RESULTS, write_csv

ROWS, KEYS, ZIPF_EXPONENT, SEED = 1_000_000, 100_000, 1.0, 20261122
EPSILONS, DELTAS = (0.1, 1.0, 5.0), (1e-5, 1e-8)
# (ε, δ) → (optimal, Laplace thresholding, Gaussian thresholding) midpoints measured from another library's optimal implementation
REFERENCE = {(1.0, 1e-5): (11.4, 11.8, 18.2), (0.1, 1e-5): (85.7, 109.2, 144.6), (5.0, 1e-8): (4.5, 4.5, 7.7)}
PRIMITIVES = (optimal, laplace_threshold, gaussian_threshold)


def zipf_unit_counts(rng: np.random.Generator) -> np.ndarray:
    """Distinct units per key for the keys that occur: each row is its own unit."""
    weights = 1.0 / np.arange(1, KEYS + 1) ** ZIPF_EXPONENT
    keys = rng.choice(KEYS, size=ROWS, p=weights / weights.sum())
    counts = np.bincount(keys, minlength=KEYS)
    return counts[counts > 0]


def row(primitive: PartitionSelection, counts: np.ndarray, reference: float | None, rng: np.random.Generator) -> dict:
    kept, _ = primitive.keep(counts, rng=rng)
    return {
        "epsilon": primitive.epsilon,
        "delta": primitive.delta,
        "max_groups": primitive.max_groups,
        "primitive": primitive.name,
        "midpoint": round(primitive.midpoint(), 3),
        "reference_midpoint": "" if reference is None else reference,
        "always_kept": primitive.always_kept(),
        "expected_fraction_kept": round(float(np.mean(primitive.probability_of_keep(counts))), 5),
        "sampled_fraction_kept": round(float(kept.mean()), 5),
        "fraction_of_rows_kept": round(float(counts[kept].sum() / counts.sum()), 5),
    }


def main() -> None:
    rng = np.random.default_rng(SEED)
    counts = zipf_unit_counts(rng)
    print(f"Zipf({ZIPF_EXPONENT}) keys: {ROWS:,} rows over {KEYS:,} keys, {counts.size:,} keys occur, "
          f"{int(np.sum(counts == 1)):,} with a single unit\n")
    rows = []
    for epsilon in EPSILONS:
        for delta in DELTAS:
            references = REFERENCE.get((epsilon, delta), (None, None, None))
            for make, reference in zip(PRIMITIVES, references):
                rows.append(row(make(epsilon, delta), counts, reference, rng))
    for k in (1, 2, 3, 5, 10, 20):
        chosen = choose(1.0, 1e-5, k)
        for make in PRIMITIVES:
            primitive = make(1.0, 1e-5, k)
            result = row(primitive, counts, None, rng)
            result["primitive"] += " (chosen)" if primitive.name == chosen.name else ""
            rows.append(result)

    header = f"{'eps':>5} {'delta':>7} {'k':>3}  {'primitive':<32} {'midpoint':>9} {'ref':>6} {'always':>7} {'E[kept]':>8} {'kept':>8} {'rows kept':>9}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['epsilon']:>5g} {r['delta']:>7g} {r['max_groups']:>3}  {r['primitive']:<32} {r['midpoint']:>9.2f} "
              f"{str(r['reference_midpoint']):>6} {r['always_kept']:>7} {r['expected_fraction_kept']:>8.4f} "
              f"{r['sampled_fraction_kept']:>8.4f} {r['fraction_of_rows_kept']:>9.4f}")

    write_csv("partition_selection.csv", rows)
    plot_keep_curves(RESULTS / "partition_selection.png")
    print(f"\nwrote {RESULTS / 'partition_selection.csv'} and {RESULTS / 'partition_selection.png'}")


def plot_keep_curves(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for axis, (epsilon, delta) in zip(axes, ((1.0, 1e-5), (0.1, 1e-5))):
        n = np.arange(0, math.ceil(gaussian_threshold(epsilon, delta).midpoint() * 1.6))
        for make in PRIMITIVES:
            primitive = make(epsilon, delta)
            axis.plot(n, primitive.probability_of_keep(n), label=f"{primitive.name} (mid {primitive.midpoint():.1f})")
        axis.set(title=f"ε = {epsilon:g}, δ = {delta:g}", xlabel="distinct units n", ylabel="P[keep]")
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
