"""Workloads whose parts read disjoint attributes (or share a small set Z): the planner's choice before
and after the composite family.

For prefixes on x and on y, all ranges on x beside the (y, s) marginal, and all ranges on x and on y
beside the s marginal, with ordered x and y of n ∈ {64, 256} cells and a categorical s of 4; and for
all ranges of age by sex beside the (sex, race) marginal (parts sharing Z = {sex}), with an ordered age
of n ∈ {74, 256}, sex of 2 and race of 5; under ρ = 1 zCDP and ε = 1 Laplace: the chosen strategy and its exact expected error divided by the SVD bound
(docs/math.md §7), without the composite family ("before": the best single family) and with it ("after"),
and CPU times on one core (BLAS threads pinned to 1) of planning and of answering (discrete noise, GLS,
the total correction, every answer with its variance) on 48 842 rows spread uniformly.

    /work/venv/bin/python benchmarks/composite.py     # prints the table, writes results/composite.csv
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
from planner import AllRange, Domain, Factor, Identity, Plan, Privacy, Product, Workload
from planner.strategies import composite

from results_io import number_text, print_table, write_csv
from timing import cold_plan

SIZES = (64, 256)
ROWS_OF_DATA = 48_842
PRIVACIES = {"zCDP ρ=1": Privacy.zcdp(1.0), "Laplace ε=1": Privacy.laplace(1.0)}
COLUMNS = [
    "workload", "n", "privacy", "before", "before ratio", "before plan s", "before answer s",
    "after", "after ratio", "after plan s", "after answer s",
]

DISJOINT: dict[str, Callable[[Domain], Workload]] = {
    "prefix x + prefix y": lambda dom: Workload.prefix(dom, "x") + Workload.prefix(dom, "y"),
    "ranges x + marginal (y, s)": lambda dom: Workload.all_range(dom, "x") + Workload.marginals(dom, [("y", "s")]),
    "ranges x + ranges y + marginal s": lambda dom: (
        Workload.all_range(dom, "x") + Workload.all_range(dom, "y") + Workload.marginals(dom, [("s",)])
    ),
}


@contextmanager
def without_composite() -> Iterator[None]:
    """The planner as it was before the composite family was registered."""
    offered = composite.candidates
    composite.candidates = lambda *arguments, **options: []  # type: ignore[assignment]
    try:
        yield
    finally:
        composite.candidates = offered  # type: ignore[assignment]


def answer_seconds(chosen: Plan, data: dict[tuple[str, ...], np.ndarray]) -> float:
    start = time.process_time()
    chosen.answer(chosen.measure(data, rng=1))
    return time.process_time() - start


def data_for(dom: Domain) -> dict[tuple[str, ...], np.ndarray]:
    cells = np.random.default_rng(0).multinomial(ROWS_OF_DATA, np.full(dom.size, 1 / dom.size))
    return {dom.attributes: cells.reshape(dom.shape(dom.attributes))}


def ranges_by_sex(size: int) -> Workload:
    dom = Domain({"age": size, "sex": 2, "race": 5}, ordered={"age"})
    ranges = Product(dom, (Factor(("age",), AllRange(size)), Factor(("sex",), Identity(2))))
    return Workload(dom, (ranges,)) + Workload.marginals(dom, [("sex", "race")])


def cases() -> Iterator[tuple[str, int, Workload]]:
    for size in SIZES:
        dom = Domain({"x": size, "y": size, "s": 4}, ordered={"x", "y"})
        for name, make in DISJOINT.items():
            yield name, size, make(dom)
    for size in (74, 256):
        yield "ranges age by sex + marginal (sex, race)", size, ranges_by_sex(size)


def rows() -> list[dict[str, object]]:
    result = []
    for name, size, workload in cases():
        data = data_for(workload.domain)
        for label, privacy in PRIVACIES.items():
            with without_composite():
                before, before_plan = cold_plan(workload, privacy)
            before_answer = answer_seconds(before, data)
            after, after_plan = cold_plan(workload, privacy)
            after_answer = answer_seconds(after, data)
            result.append({
                "workload": name, "n": size, "privacy": label,
                "before": before.strategy_name, "before ratio": before.svd_ratio or "",
                "before plan s": before_plan, "before answer s": before_answer,
                "after": after.strategy_name, "after ratio": after.svd_ratio or "",
                "after plan s": after_plan, "after answer s": after_answer,
            })
    return result


def main() -> None:
    table = rows()
    print_table(table, COLUMNS, number_text)
    print(f"wrote {write_csv('composite.csv', table, COLUMNS)}")


if __name__ == "__main__":
    main()
