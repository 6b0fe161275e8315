"""Sample complexity of local-DP mechanisms on McKenna et al. 2020's workloads, optimized vs classic protocols.

For each workload (Histogram, Prefix, All Range over n = 64 ordered types; All Marginals, 3-way
Marginals and Parity over 6 binary attributes) and ε ∈ {0.5, 1, 2, 4}: the number of users each
protocol needs for a worst-case normalized variance of α = 0.01 (McKenna et al. 2020, Corollary "Sample
complexity"), for every classic protocol, for the projected-gradient-descent strategy alone ("PGD")
and for what `optimize` returns ("Optimized": PGD, or a classic protocol if one is better).
Then, for the PGD strategy, the empirical total variance over repeated simulated surveys of
100,000 users (response counts drawn from the multinomial distributions of `Q`) next to the
predicted variance, and the time to optimize an n = 256 Prefix workload on one core.

    python benchmarks/ldp.py [--trials 4000] [--quick]

Prints tables and writes benchmarks/results/ldp.csv, ldp_timing.csv and ldp.png.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # "one core": single-threaded BLAS (set before numpy loads)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from planner.ldp import Factorization, classic_protocols, optimize  # noqa: E402
from planner.ldp.workloads import all_range, histogram, marginals, parity, prefix  # noqa: E402
from results_io import RESULTS, write_csv  # noqa: E402

TARGET_NORMALIZED_VARIANCE = 0.01
EPSILONS = (0.5, 1.0, 2.0, 4.0)
USERS = 100_000
PROTOCOLS = ("RR", "RAPPOR", "OUE", "OLH", "HR", "SS", "Hierarchical", "Fourier")


def workloads() -> dict[str, np.ndarray]:
    return {
        "Histogram": histogram(64),
        "Prefix": prefix(64),
        "All Range": all_range(64),
        "All Marginals": marginals(6, list(range(7))),
        "3-way Marginals": marginals(6, [3]),
        "Parity": parity(6),
    }


def simulated_variance(factorization: Factorization, counts: np.ndarray, trials: int, seed: int) -> float:
    """Mean total squared error of `V y` over `trials` surveys, `y ~ Σ_u Multinomial(counts_u, Q[:, u])`."""
    rng = np.random.default_rng(seed)
    responses = np.zeros((trials, factorization.Q.shape[0]))
    for user_type, count in enumerate(counts):
        if count:
            responses += rng.multinomial(int(count), factorization.Q[:, user_type], size=trials)
    errors = responses @ factorization.V.T - factorization.W @ counts
    return float(np.mean(np.sum(errors**2, axis=1)))


def run_grid(trials: int, iterations: int | None) -> list[dict[str, object]]:
    rows = []
    options = {} if iterations is None else {"iterations": iterations}
    for name, W in workloads().items():
        counts = np.random.default_rng(1).multinomial(USERS, np.full(W.shape[1], 1 / W.shape[1]))
        for epsilon in EPSILONS:
            classic = classic_protocols(W, epsilon)
            pgd = optimize(W, epsilon, seed=0, compare_with_classic=False, **options)
            chosen = optimize(W, epsilon, seed=0, **options)
            complexities = {label: protocol.sample_complexity(TARGET_NORMALIZED_VARIANCE) for label, protocol in classic.items()}
            best_label = min(complexities, key=complexities.get)
            predicted = pgd.variance(counts)
            empirical = simulated_variance(pgd, counts, trials, seed=2)
            rows.append({
                "workload": name, "epsilon": epsilon,
                **{label: complexities.get(label, float("nan")) for label in PROTOCOLS},
                "PGD": pgd.sample_complexity(TARGET_NORMALIZED_VARIANCE),
                "Optimized": chosen.sample_complexity(TARGET_NORMALIZED_VARIANCE),
                "optimized_is": chosen.name,
                "best_classic": best_label,
                "pgd_vs_best_classic": pgd.sample_complexity(TARGET_NORMALIZED_VARIANCE) / complexities[best_label],
                "predicted_variance": predicted,
                "empirical_variance": empirical,
                "empirical_over_predicted": empirical / predicted,
            })
            print(f"  {name} ε={epsilon}: PGD/best classic = {rows[-1]['pgd_vs_best_classic']:.3f}", flush=True)
    return rows


def time_large(num_types: int) -> dict[str, object]:
    W = prefix(num_types)
    wall, cpu = time.perf_counter(), time.process_time()
    result = optimize(W, 1.0, seed=0)
    return {
        "workload": f"Prefix n={num_types}", "epsilon": 1.0,
        "wall_seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu,
        "outputs": result.Q.shape[0], "result": result.name,
    }


def print_tables(rows: list[dict[str, object]], timing: dict[str, object]) -> None:
    columns = PROTOCOLS + ("PGD", "Optimized")
    print(f"\nUsers needed for worst-case normalized variance {TARGET_NORMALIZED_VARIANCE} (fewer is better)")
    header = f"{'workload':16s} {'ε':>4s} " + " ".join(f"{label:>12s}" for label in columns) + "  PGD/best"
    print(header)
    print("-" * len(header))
    for row in rows:
        cells = " ".join(f"{row[label]:12,.0f}" if row[label] == row[label] else f"{'—':>12s}" for label in columns)
        print(f"{row['workload']:16s} {row['epsilon']:4.1f} {cells}  {row['pgd_vs_best_classic']:.3f} ({row['best_classic']})")
    print(f"\nPGD strategy on {USERS:,} simulated users (uniform types): total variance of V y")
    print(f"{'workload':16s} {'ε':>4s} {'predicted':>14s} {'empirical':>14s} {'ratio':>7s}")
    for row in rows:
        print(f"{row['workload']:16s} {row['epsilon']:4.1f} {row['predicted_variance']:14,.0f} "
              f"{row['empirical_variance']:14,.0f} {row['empirical_over_predicted']:7.3f}")
    print(f"\nOptimizing {timing['workload']} (ε = 1, defaults, m = {timing['outputs']}): "
          f"{timing['wall_seconds']:.1f} s wall, {timing['cpu_seconds']:.1f} s CPU on one core")
    print_targets(rows, timing)


def print_targets(rows: list[dict[str, object]], timing: dict[str, object]) -> None:
    """The issue's targets, each with the measured figure."""
    classic_best = {id(row): min(row[label] for label in PROTOCOLS if row[label] == row[label]) for row in rows}
    never_worse = all(row["Optimized"] <= classic_best[id(row)] * (1 + 1e-9) for row in rows)
    pgd_never_worse = [f"{row['workload']} ε={row['epsilon']}" for row in rows if row["PGD"] > classic_best[id(row)] * (1 + 1e-9)]
    gains = {row["workload"]: 1 - row["pgd_vs_best_classic"] for row in rows if row["epsilon"] == 1.0}
    worst_empirical = max(abs(row["empirical_over_predicted"] - 1) for row in rows)
    print("\nTargets")
    print(f"  Optimized never above the best classic protocol: {'yes' if never_worse else 'NO'}"
          f" (PGD alone is above it on: {', '.join(pgd_never_worse) or 'none'})")
    for name in ("Prefix", "All Range"):
        print(f"  PGD vs best classic at ε=1 on {name}: {100 * gains[name]:.0f}% lower (target ≥ 15%)")
    print(f"  n={timing['outputs'] // 4} optimization: {timing['cpu_seconds']:.1f} s CPU (target < 60 s)")
    print(f"  empirical vs predicted variance: worst deviation {100 * worst_empirical:.1f}% (target ≤ 5%)")


def plot(rows: list[dict[str, object]], path: Path) -> None:
    """Sample complexity against ε, one panel per workload, one line per protocol (log scale)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(row["workload"] for row in rows))
    figure, axes = plt.subplots(2, 3, figsize=(14, 8), sharex=True)
    for axis, name in zip(axes.flat, names):
        cells = [row for row in rows if row["workload"] == name]
        for label in PROTOCOLS + ("PGD",):
            values = [row[label] for row in cells]
            style = {"color": "black", "linewidth": 2.5} if label == "PGD" else {"linewidth": 1, "alpha": 0.8}
            axis.plot([row["epsilon"] for row in cells], values, marker="o", label=label, **style)
        axis.set(title=name, xscale="log", yscale="log", xlabel="ε", ylabel=f"users for normalized variance {TARGET_NORMALIZED_VARIANCE}")
        axis.set_xticks(EPSILONS, [str(epsilon) for epsilon in EPSILONS])
        axis.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    axes.flat[0].legend(fontsize=8)
    figure.suptitle("Local DP: sample complexity of classic protocols and the optimized (PGD) strategy, n = 64")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=4000, help="simulated surveys per cell")
    parser.add_argument("--quick", action="store_true", help="fewer PGD iterations (smoke run)")
    arguments = parser.parse_args()
    rows = run_grid(arguments.trials, 50 if arguments.quick else None)
    timing = time_large(64 if arguments.quick else 256)
    print_tables(rows, timing)
    write_csv("ldp.csv", rows)
    write_csv("ldp_timing.csv", [timing])
    plot(rows, RESULTS / "ldp.png")


if __name__ == "__main__":
    main()
