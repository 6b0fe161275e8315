"""Ranges on two ordered attributes: the planner's choice before and after the Kronecker family.

For all 2-D ranges, 2-D prefixes (one product ``W_x ⊗ W_y``) and all ranges on x and y grouped by a
categorical s (``AllRange ⊗ Identity(4) ⊗ AllRange``), at n × n cells, under ρ = 1 zCDP and ε = 1
Laplace: the chosen strategy and its exact expected error divided by the SVD bound (docs/math.md §7), without
the Kronecker family ("before": what ``plan`` chose until it was registered) and with it ("after"), with
CPU times on one core (BLAS threads pinned to 1) of planning and of answering (discrete noise, GLS and
every answer with its variance; when a workload has more than ``MAX_ANSWERED`` queries — all 2-D ranges
at 256 × 256 are 1.1·10⁹ — answering stops at the GLS estimate of the measured marginal, which fixes
every answer).

    /work/venv/bin/python benchmarks/kronecker.py     # prints the table, writes results/kronecker.csv
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from unittest import mock

import numpy as np
from planner import (
    AllRange,
    Domain,
    Factor,
    Identity,
    Plan,
    Prefix,
    Privacy,
    Product,
    Workload,
)
from planner.strategies import kronecker

from results_io import number_text, print_table, write_csv
from timing import cold_plan

MAX_ANSWERED = 2**25
ROWS_OF_DATA = 48_842
PRIVACIES = {"zCDP ρ=1": Privacy.zcdp(1.0), "Laplace ε=1": Privacy.laplace(1.0)}
COLUMNS = [
    "workload", "privacy", "before", "before ratio", "before plan s", "before answer s",
    "after", "after ratio", "after plan s", "after answer s", "answered",
]


def two_dimensional(kind: type, size: int, groups: int = 0) -> Workload:
    sizes = {"x": size, "s": groups, "y": size} if groups else {"x": size, "y": size}
    dom = Domain(sizes, ordered={"x", "y"})
    middle = (Factor(("s",), Identity(groups)),) if groups else ()
    return Workload(dom, (Product(dom, (Factor(("x",), kind(size)), *middle, Factor(("y",), kind(size)))),))


CASES: dict[str, Callable[[], Workload]] = {
    "all 2-D ranges, 64 × 64": lambda: two_dimensional(AllRange, 64),
    "2-D prefixes, 64 × 64": lambda: two_dimensional(Prefix, 64),
    "all 2-D ranges by s, 64 × 4 × 64": lambda: two_dimensional(AllRange, 64, groups=4),
    "all 2-D ranges, 256 × 256": lambda: two_dimensional(AllRange, 256),
    "2-D prefixes, 256 × 256": lambda: two_dimensional(Prefix, 256),
}


@contextmanager
def without_kronecker() -> Iterator[None]:
    """The planner as it was before the Kronecker family was listed (its family answers nothing)."""
    with mock.patch.object(kronecker, "candidates", lambda *arguments, **keywords: []):
        yield


def answer_seconds(chosen: Plan, data: dict[tuple[str, ...], np.ndarray]) -> tuple[float, str]:
    start = time.process_time()
    measurement = chosen.measure(data, rng=1)
    if chosen.workload.query_count <= MAX_ANSWERED:
        chosen.answer(measurement)
        answered = "all"
    else:
        chosen.candidate.estimate(measurement)  # type: ignore[attr-defined]  (range and Kronecker candidates)
        answered = f"GLS estimate ({chosen.workload.query_count:.2g} queries)"
    return time.process_time() - start, answered


def data_for(workload: Workload) -> dict[tuple[str, ...], np.ndarray]:
    dom = workload.domain
    cells = np.random.default_rng(0).multinomial(ROWS_OF_DATA, np.full(dom.size, 1 / dom.size))
    return {dom.attributes: cells.reshape(dom.shape(dom.attributes))}


def rows() -> list[dict[str, object]]:
    result = []
    for name, make in CASES.items():
        workload = make()
        data = data_for(workload)
        for label, privacy in PRIVACIES.items():
            with without_kronecker():
                before, before_plan = cold_plan(workload, privacy)
                before_answer, _ = answer_seconds(before, data)
            after, after_plan = cold_plan(workload, privacy)
            after_answer, answered = answer_seconds(after, data)
            result.append({
                "workload": name, "privacy": label,
                "before": before.strategy_name, "before ratio": before.svd_ratio or "",
                "before plan s": before_plan, "before answer s": before_answer,
                "after": after.strategy_name, "after ratio": after.svd_ratio or "",
                "after plan s": after_plan, "after answer s": after_answer, "answered": answered,
            })
    return result


def main() -> None:
    table = rows()
    print_table(table, COLUMNS, number_text)
    print(f"wrote {write_csv('kronecker.csv', table, COLUMNS)}")


if __name__ == "__main__":
    main()
