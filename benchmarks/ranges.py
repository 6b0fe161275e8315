"""Range workloads on one ordered attribute: accuracy against the SVD bound, and speed.

Accuracy: expected total squared error (exact, for the discrete noise actually released) divided by
the SVD bound (docs/math.md §7, with the closed-form range spectra of ``planner.strategies.eigen``), for the
best hierarchy (over b), the eigen-design (zCDP only), the hat hierarchy, p-Identity (HDMM's published
method) and p-Identity with ridge-pair noise (ε-DP only), and the planner's choice; ε = 1 or ρ = 1.
Speed: planning (``planner.plan``: every family, the choice, budgets) and answering (measurement with
discrete noise, GLS, all answers and their variances) on all ranges, n = 4096, and on all ranges and
prefixes, n = 1024, under ε-DP (where p-Identity with ridge noise is optimised at planning time); one core (BLAS threads
pinned to 1; CPU time of the process is the figure, wall-clock beside it).

    /work/venv/bin/python benchmarks/ranges.py     # prints both tables, writes results/ranges*.csv
    /work/venv/bin/python benchmarks/ranges.py --only speed   # one table (and its CSV) only
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from results_io import number_text, print_table, write_csv

from planner import AllRange, Domain, Prefix, Privacy, Workload, plan
from planner.caches import clear_caches
from planner.strategies import eigen, hats, hierarchy, pidentity, ridge
from planner.strategies.eigen import range_gram_eigenvalues

SPEED_LIMIT_SECONDS = 2.0
P_IDENTITY_LIMIT_SECONDS = 3.0  # n = 1024 under ε-DP, where p-Identity is optimised
ROWS_OF_DATA = 48_842


@dataclass(frozen=True)
class RangeRow:
    name: str
    kind: type  # AllRange or Prefix
    size: int
    gaussian_target: float
    laplace_target: float
    published: str

    def workload(self) -> Workload:
        dom = Domain({"age": self.size}, ordered={"age"})
        return Workload.all_range(dom, "age") if self.kind is AllRange else Workload.prefix(dom, "age")

    def bound(self, privacy: Privacy) -> float:
        total = np.sqrt(range_gram_eigenvalues(self.kind(self.size))).sum() ** 2 / self.size
        return 2 * total / privacy.epsilon**2 if privacy.is_laplace else total / (2 * privacy.rho)


ROWS = [
    RangeRow("all range queries, n = 1024", AllRange, 1024, 1.05, 4.8, "1.48 (per-level budgets + GLS) / 4.98 (p-Identity)"),
    RangeRow("prefix, n = 1024", Prefix, 1024, 1.05, 5.2, "1.49 / 5.39"),
]


def _best(family: Callable[..., list], workload: Workload, privacy: Privacy) -> float | None:
    found = family(workload, privacy)
    return min(c.expected_error() for c in found) if found else None


def accuracy_rows() -> list[dict[str, object]]:
    results = []
    for row in ROWS:
        workload = row.workload()
        for privacy in (Privacy.zcdp(1.0), Privacy.laplace(1.0)):
            bound = row.bound(privacy)
            tree = min(hierarchy.candidates(workload, privacy), key=lambda c: c.expected_error())
            design = _best(eigen.candidates, workload, privacy)
            hat = _best(hats.candidates, workload, privacy)
            identity_plus = _best(pidentity.candidates, workload, privacy)
            ridged = _best(ridge.candidates, workload, privacy)
            chosen = plan(workload, privacy)
            target = row.laplace_target if privacy.is_laplace else row.gaussian_target
            ratio = chosen.expected_error() / bound
            results.append({
                "workload": row.name, "privacy": str(privacy), "svd_bound": bound,
                "hierarchy": f"{tree.expected_error() / bound:.4f} ({tree.name})",
                "eigen": "" if design is None else f"{design / bound:.4f}",
                "hats": "" if hat is None else f"{hat / bound:.4f}",
                "p_identity": "" if identity_plus is None else f"{identity_plus / bound:.4f}",
                "p_identity_ridge": "" if ridged is None else f"{ridged / bound:.4f}",
                "choice": chosen.strategy_name, "ratio": ratio, "target": f"≤ {target:g}",
                "meets_target": "yes" if ratio <= target else "NO", "published": row.published,
            })
    return results


SPEED_CASES = [  # (kind, size, privacy, limit in CPU seconds)
    (AllRange, 4096, Privacy.laplace(1.0), SPEED_LIMIT_SECONDS),
    (AllRange, 4096, Privacy.zcdp(1.0), SPEED_LIMIT_SECONDS),
    (AllRange, 1024, Privacy.laplace(1.0), P_IDENTITY_LIMIT_SECONDS),
    (Prefix, 1024, Privacy.laplace(1.0), P_IDENTITY_LIMIT_SECONDS),
]


def speed_rows() -> list[dict[str, object]]:
    results = []
    for kind, size, privacy, limit in SPEED_CASES:
        dom = Domain({"age": size}, ordered={"age"})
        data = np.bincount(np.random.default_rng(0).integers(0, size, ROWS_OF_DATA), minlength=size)
        workload = Workload.all_range(dom, "age") if kind is AllRange else Workload.prefix(dom, "age")
        clear_caches()  # cold: the accuracy table may have optimised the same strategies
        cpu, wall = time.process_time(), time.perf_counter()
        chosen = plan(workload, privacy)
        planned_cpu, planned_wall = time.process_time() - cpu, time.perf_counter() - wall
        cpu, wall = time.process_time(), time.perf_counter()
        candidate = chosen.candidate
        answers = candidate.answer(candidate.measure({m: data for m in candidate.required_marginals()}))
        answered_cpu, answered_wall = time.process_time() - cpu, time.perf_counter() - wall
        total = planned_cpu + answered_cpu
        label = "all ranges" if kind is AllRange else "prefixes"
        results.append({
            "workload": f"{label}, n = {size} ({answers.values[0].size} queries)", "privacy": str(privacy),
            "choice": chosen.strategy_name, "plan_cpu_s": planned_cpu, "answer_cpu_s": answered_cpu,
            "total_cpu_s": total, "total_wall_s": planned_wall + answered_wall,
            "limit_s": limit, "meets_limit": "yes" if total <= limit else "NO",
        })
    return results


def _print_and_write(title: str, results: list[dict[str, object]], name: str) -> None:
    print(title)
    print_table(results, [c for c in results[0] if c != "svd_bound"], number_text)
    print()
    write_csv(name, results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("accuracy", "speed"), help="run one of the two tables (default: both)")
    only = parser.parse_args().only
    if only in (None, "accuracy"):
        _print_and_write("range workloads: expected total squared error / SVD bound", accuracy_rows(), "ranges_accuracy.csv")
    if only in (None, "speed"):
        _print_and_write("range workloads: planning + answering time (one core)", speed_rows(), "ranges_speed.csv")


if __name__ == "__main__":
    main()
