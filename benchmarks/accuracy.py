"""Accuracy of the planner: expected total squared error as a multiple of the SVD lower bound (docs/math.md §7).

Each strategy family gets its own column (its best candidate; "—" when it does not apply or its
answers would be inconsistent is marked "*"), the planner's choice comes last. ε = 1 (Laplace) and
ρ = 1 (zCDP); errors are exact for the discrete noise actually released. The p-identity column is
HDMM's published method with independent Laplace noise, which the planner no longer considers (its
ridge-noise version contains it); it is computed here as the baseline. ``benchmarks/ranges.py`` has
the range rows' per-family detail and their timing.

    /work/venv/bin/python benchmarks/accuracy.py          # prints the table, writes results/accuracy.csv
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner import Domain, Privacy, Workload, plan
from planner.select import all_candidates
from planner.strategies import pidentity
from results_io import number_text, print_table, write_csv


ADULT = Domain(
    {"workclass": 9, "education": 16, "marital": 7, "occupation": 15, "relationship": 6, "race": 5, "sex": 2, "income": 2}
)
BINARY16 = Domain({f"x{i:02d}": 2 for i in range(16)})

FAMILIES = ("identity", "marginals", "fourier", "residual", "hierarchy", "eigen", "hats", "p-identity", "p-identity+ridge")
RANGES = Domain({"age": 1024}, ordered={"age"})


@dataclass(frozen=True)
class Row:
    """One workload of the table, with the targets set for it and the best published figures."""

    name: str
    workload: Callable[[], Workload]
    gaussian_target: float | None
    laplace_target: float | None
    published: str


ROWS: list[Row] = [
    Row("all 2-way marginals, Adult", lambda: Workload.all_kway(ADULT, 2), 1.02, 21.0,
        "1.077 (Fourier, non-uniform) / 22.2 (weighted marginals + GLS)"),
    Row("all 2-way marginals, 16 binary", lambda: Workload.all_kway(BINARY16, 2), 1.02, 68.0, "1.000 / 71.6"),
    Row("all 3-way marginals, 16 binary", lambda: Workload.all_kway(BINARY16, 3), 1.02, None, "—"),
    Row("all range queries, n = 1024", lambda: Workload.all_range(RANGES, "age"), 1.05, 4.8,
        "1.48 (per-level budgets + GLS) / 4.98 (p-Identity)"),
    Row("prefix, n = 1024", lambda: Workload.prefix(RANGES, "age"), 1.05, 5.2, "1.49 / 5.39"),
]


def family_of(name: str) -> str:
    return name.split("(")[0]


def planned_ratio(row: Row, privacy: Privacy) -> float:
    """The planner's choice: its expected error over the SVD bound (continuous noise, the papers' yardstick)."""
    return plan(row.workload(), privacy).svd_ratio


def measure_row(row: Row, privacy: Privacy) -> dict[str, object]:
    workload = row.workload()
    chosen = plan(workload, privacy)
    bound = chosen.svd_bound()
    result: dict[str, object] = {
        "workload": row.name,
        "cells": workload.domain.size,
        "privacy": str(privacy),
        "svd_bound": bound,
    }
    candidates = all_candidates(workload, privacy, include_inconsistent=True) + pidentity.candidates(workload, privacy)
    for family in FAMILIES:
        members = [c for c in candidates if family_of(c.name) == family]
        if not members:
            result[family] = ""
            continue
        best = min(members, key=lambda c: c.expected_error())
        mark = "" if getattr(best, "consistent", True) else "*"
        result[family] = f"{best.expected_error() / bound:.4f}{mark}"
    target = row.gaussian_target if not privacy.is_laplace else row.laplace_target
    result["choice"] = chosen.strategy_name
    result["ratio"] = chosen.expected_error() / bound
    result["target"] = "report" if target is None else f"≤ {target:g}"
    result["meets_target"] = "" if target is None else ("yes" if result["ratio"] <= target else "NO")
    result["published"] = row.published
    return result


def main() -> None:
    results = [measure_row(row, privacy) for row in ROWS for privacy in (Privacy.zcdp(1.0), Privacy.laplace(1.0))]
    columns = ["workload", "cells", "privacy", *FAMILIES, "choice", "ratio", "target", "meets_target", "published"]
    print("expected total squared error / SVD bound (* = inconsistent over real cells, not selectable)")
    print_table(results, columns, number_text)
    write_csv("accuracy.csv", results, [*columns, "svd_bound"])


if __name__ == "__main__":
    main()
