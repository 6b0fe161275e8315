"""Plans that keep every part of a workload at least as accurate as measuring that part on its own share.

A CUBE answers several grouping sets with one plan. The plan of least total squared error can leave a
coarse set (the grand total, a subtotal) worse than a tool answering each set as its own query at
``ε/S`` would — the fine cells outnumber it. :func:`plan_balanced` plans the workload, compares each *part*
(a set of products: one grouping set) with its **baseline** — the planner's plan for that part alone at
``1/S`` of the budget, ``S`` parts — and, while some part's mean variance exceeds ``0.9·π/4`` of its baseline's,
raises that part's weight and plans again. ``π/4``: an estimate whose noise is close to normal (a GLS
combination of several measurements) has the mean absolute error of a Laplace-noised baseline when its
variance is ``π/4`` of the baseline's (``√(2/π)·σ`` against ``σ/√2``); the parts are held 10 % below that
(``BASELINE_FACTOR``), so a measured comparison with the baseline's tool is not a coin toss. The weights change only what the
plan measures and at which budgets; the answers are the same queries. Among the plans tried it returns the
least total error (original weights) of those that meet every part's baseline, else the one whose worst
part is closest to it. Public inputs only, as any plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from planner.privacy import Privacy
from planner.workload import Workload

PARITY = math.pi / 4  # the variance ratio at which a normal error's mean absolute error equals a Laplace error's
BASELINE_FACTOR = 0.9 * PARITY  # with a margin: a part's mean absolute error about 5 % below its baseline's
ROUNDS = 8  # plans tried at most (the first with the workload's own weights)
TOLERANCE = 1e-6
MARGIN = 1.05  # a violated part is aimed 5 % below its baseline

Planner = Callable[[Workload, Privacy], object]  # (workload, privacy) -> a Plan: query_variances(), expected_error()


@dataclass(frozen=True)
class Balance:
    """What :func:`plan_balanced` did: per part, its weight factor and its mean variance over its baseline's
    (``BASELINE_FACTOR``-scaled: at most 1 when the part is more accurate than measured alone), and the plans tried."""

    factors: tuple[float, ...]
    ratios: tuple[float, ...]
    rounds: int

    @property
    def feasible(self) -> bool:
        return all(r <= 1 + TOLERANCE for r in self.ratios)


def _mean_variance(variances: Sequence[np.ndarray], indices: Sequence[int]) -> float:
    chosen = [np.asarray(variances[i], dtype=float) for i in indices]
    return float(np.mean(np.concatenate(chosen))) if chosen else 0.0


def plan_balanced(workload: Workload, parts: Sequence[Sequence[int]], privacy: Privacy, make_plan: Planner) -> tuple[object, Balance]:
    """The plan (``make_plan``'s, for the workload with the parts' weights raised as needed: module doc) and
    what was done. ``parts`` lists product indices; products in no part keep their weight."""
    products = workload.products
    share = privacy.scaled(1.0 / len(parts))
    baselines = []
    for part in parts:
        alone = make_plan(Workload(workload.domain, tuple(products[i] for i in part)), share)
        baselines.append(BASELINE_FACTOR * _mean_variance(alone.query_variances(), range(len(part))))  # type: ignore[attr-defined]
    factors = np.ones(len(parts))
    best: tuple[tuple[bool, float], object, Balance] | None = None
    for round_ in range(1, ROUNDS + 1):
        weighted = list(products)
        for part, factor in zip(parts, factors):
            for index in part:
                weighted[index] = products[index].scaled(float(factor))
        plan = make_plan(Workload(workload.domain, tuple(weighted)), privacy)
        variances = plan.query_variances()  # type: ignore[attr-defined]
        ratios = np.array([_mean_variance(variances, part) / baseline if baseline > 0 else 0.0 for part, baseline in zip(parts, baselines)])
        total = float(sum(p.weight**2 * float(np.sum(v)) for p, v in zip(products, variances)))
        balance = Balance(tuple(float(f) for f in factors), tuple(float(r) for r in ratios), round_)
        key = (balance.feasible, -total if balance.feasible else -float(ratios.max()))
        if best is None or key > best[0]:
            best = (key, plan, balance)
        if balance.feasible:
            break
        factors = factors * np.maximum(ratios * MARGIN, 1.0) ** 0.75  # with optimal budgets a part's variance falls about as weight^(-4/3)
    assert best is not None
    return best[1], best[2]
