"""Speed of the planner: planning (every family, the choice, budgets) and answering (noise + GLS).

One core: BLAS threads are pinned to 1 and the limits apply to the process CPU time (the wall-clock
time is printed beside it; on a shared, loaded machine it is larger). Data: random rows drawn over the domain, aggregated into exactly
the marginals the plan asks for (the database's job, not timed). No full-domain matrix is ever built.
Each figure is the median of ``REPEATS`` cold runs (the planner's caches are cleared before each).

    /work/venv/bin/python benchmarks/planning.py         # prints the table, writes results/planning.csv
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402

from planner import Domain, Privacy, Workload, plan  # noqa: E402
from planner.caches import clear_caches  # noqa: E402
from results_io import print_table, write_csv  # noqa: E402

REPEATS = 3
ROWS_OF_DATA = 48_842  # as many rows as the Adult data set

ADULT = Domain(
    {"workclass": 9, "education": 16, "marital": 7, "occupation": 15, "relationship": 6, "race": 5, "sex": 2, "income": 2}
)
BINARY16 = Domain({f"x{i:02d}": 2 for i in range(16)})
BINARY100 = Domain({f"x{i:03d}": 2 for i in range(100)})  # 2^100 cells: ResidualPlanner's published scale
QUATERNARY30 = Domain({f"y{i:02d}": 4 for i in range(30)})  # 4^30 cells
RANGE4096 = Domain({"t": 4096}, ordered={"t"})


ZCDP, PURE = Privacy.zcdp(1.0), Privacy.laplace(1.0)


@dataclass(frozen=True)
class Case:
    name: str
    workload: Callable[[], Workload]
    limit_seconds: float | None  # plan + answer must stay under this
    privacies: tuple[Privacy, ...] = (ZCDP, PURE)
    data_rows: int = ROWS_OF_DATA  # rows behind the synthetic marginals (their count does not change the times)


CASES: list[Case] = [
    Case("all 2-way marginals, Adult", lambda: Workload.all_kway(ADULT, 2), 1.0),
    Case("all 3-way marginals, Adult", lambda: Workload.all_kway(ADULT, 3), 1.0),
    Case("all 2-way marginals, 16 binary", lambda: Workload.all_kway(BINARY16, 2), None),
    Case("all 3-way marginals, 16 binary", lambda: Workload.all_kway(BINARY16, 3), 2.0),
    Case("all 2-way marginals, 100 binary", lambda: Workload.all_kway(BINARY100, 2), 10.0, (ZCDP,), 10_000),
    Case("all 3-way marginals, 30 of size 4", lambda: Workload.all_kway(QUATERNARY30, 3), 10.0, (ZCDP,), 10_000),
    Case("all ranges (8.4 M), n = 4096", lambda: Workload.all_range(RANGE4096, "t"), 2.0),
]


def random_marginals(
    domain: Domain, wanted: tuple[tuple[str, ...], ...], seed: int, count: int = ROWS_OF_DATA
) -> dict[tuple[str, ...], np.ndarray]:
    """The marginals ``wanted`` of ``count`` random rows over ``domain``."""
    rng = np.random.default_rng(seed)
    rows = {a: rng.integers(0, n, count) for a, n in zip(domain.attributes, domain.sizes)}
    tables = {}
    for attributes in wanted:
        shape = domain.shape(attributes)
        if not attributes:
            tables[attributes] = np.array(count)
            continue
        cells = np.ravel_multi_index([rows[a] for a in attributes], shape)
        tables[attributes] = np.bincount(cells, minlength=int(np.prod(shape))).reshape(shape)
    return tables


def time_case(case: Case, privacy: Privacy) -> dict[str, object]:
    workload = case.workload()
    plan_times, answer_times, wall_times = [], [], []
    marginals = None  # the data (generated once: the database's job, not timed) does not change the times
    for repeat in range(REPEATS):
        clear_caches()
        wall, start = time.perf_counter(), time.process_time()
        chosen = plan(workload, privacy)
        planned, planned_wall = time.process_time(), time.perf_counter()
        if marginals is None:
            marginals = random_marginals(workload.domain, chosen.required_marginals(), 0, case.data_rows)
        aggregated, aggregated_wall = time.process_time(), time.perf_counter()
        chosen.answer(chosen.measure(marginals, rng=repeat))
        answered, answered_wall = time.process_time(), time.perf_counter()
        plan_times.append(planned - start)
        answer_times.append(answered - aggregated)
        wall_times.append(planned_wall - wall + answered_wall - aggregated_wall)
    plan_seconds, answer_seconds = statistics.median(plan_times), statistics.median(answer_times)
    total = plan_seconds + answer_seconds
    return {
        "workload": case.name,
        "cells": workload.domain.size if workload.domain.size < 10**9 else f"{workload.domain.size:.3g}",
        "marginals": len(workload.products),
        "privacy": str(privacy),
        "strategy": chosen.strategy_name,
        "plan_s": round(plan_seconds, 3),
        "answer_s": round(answer_seconds, 3),
        "total_s": round(total, 3),
        "fastest_s": round(min(p + a for p, a in zip(plan_times, answer_times)), 3),
        "wall_s": round(statistics.median(wall_times), 3),
        "limit_s": "" if case.limit_seconds is None else case.limit_seconds,
        "within_limit": "" if case.limit_seconds is None else ("yes" if total < case.limit_seconds else "NO"),
    }


def main() -> None:
    results = [time_case(case, privacy) for case in CASES for privacy in case.privacies]
    columns = list(results[0])
    print(f"planning and answering: CPU seconds on one core (wall beside), median of {REPEATS} cold runs")
    print_table(results, columns)
    write_csv("planning.csv", results)


if __name__ == "__main__":
    main()
