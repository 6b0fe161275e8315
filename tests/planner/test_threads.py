"""The planner's and the LDP optimizer's dense work runs on one BLAS thread whatever the process or
the environment set (``planner.threads``), and the caller's setting is restored afterwards."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from planner import Domain, Privacy, Workload, plan
from planner.ldp import design

PLAN = importlib.import_module("planner.plan")  # the modules (the package exports functions of the same names)
OPTIMIZE = importlib.import_module("planner.ldp.optimize")


def blas_threads() -> dict[str, int]:
    """Threads of numpy's and scipy's BLAS libraries, the planner's (other packages, e.g. cvxpy's
    solvers, may bring builds of their own)."""
    return {
        library["filepath"]: library["num_threads"]
        for library in threadpool_info()
        if library["user_api"] == "blas" and ("numpy" in library["filepath"] or "scipy" in library["filepath"])
    }


def recording(function: Callable, seen: list[dict[str, int]]) -> Callable:
    def recorded(*args: object, **kwargs: object) -> object:
        seen.append(blas_threads())
        return function(*args, **kwargs)

    return recorded


@pytest.mark.parametrize("entry", ["plan", "ldp design"])
def test_dense_work_sees_one_blas_thread_and_the_callers_setting_comes_back(entry: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, int]] = []
    if entry == "plan":
        monkeypatch.setattr(PLAN, "all_candidates", recording(PLAN.all_candidates, seen))
        run = lambda: plan(Workload.all_kway(Domain({"a": 3, "b": 4, "c": 5}), 2), Privacy.zcdp(1.0))  # noqa: E731
    else:
        monkeypatch.setattr(OPTIMIZE, "projected_gradient_descent", recording(OPTIMIZE.projected_gradient_descent, seen))
        run = lambda: design(np.tril(np.ones((8, 8))), 1.0, seed=0, restarts=1, iterations=5)  # noqa: E731
    with threadpool_limits(limits=2, user_api="blas"):  # what a user's OPENBLAS_NUM_THREADS=2 would give
        callers = blas_threads()
        assert 2 in callers.values()
        run()
        assert blas_threads() == callers
    assert seen and all(set(threads.values()) == {1} for threads in seen)
