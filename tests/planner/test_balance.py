"""Plans that hold every grouping set to its own share's accuracy (``planner.plan_balanced``)."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from planner import Domain, Factor, Identity, Privacy, Product, Workload, plan_balanced
from planner.balance import BASELINE_FACTOR

DOMAIN = Domain({"educ": 16, "sex": 2})
SETS = (("educ", "sex"), ("educ",), ("sex",), ())


def _cube(weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)) -> Workload:
    return Workload(DOMAIN, tuple(Product(DOMAIN, tuple(Factor((a,), Identity(DOMAIN.size_of(a))) for a in s), w) for s, w in zip(SETS, weights)))


def _make(workload: Workload, privacy: Privacy) -> planner.Plan:
    return planner.plan(workload, privacy)


def test_a_cube_keeps_every_grouping_set_below_its_own_share() -> None:
    """COUNT by CUBE (educ, sex) at ε = 1: the least-total-error plan (identity) leaves the grand total at variance
    59 against 2·4² = 32 for the total measured alone at ε/4; the balanced plan keeps every set below
    0.9·π/4 of its own, and pays for it on the finest cells."""
    plain = _make(_cube(), Privacy.laplace(1.0))
    plain_means = [float(np.mean(v)) for v in plain.query_variances()]
    alone = [float(np.mean(_make(Workload(DOMAIN, (p,)), Privacy.laplace(0.25)).query_variances()[0])) for p in _cube().products]
    assert plain_means[3] > alone[3]  # the plain plan's grand total is worse than measured alone
    balanced, balance = plan_balanced(_cube(), [[0], [1], [2], [3]], Privacy.laplace(1.0), _make)
    means = [float(np.mean(v)) for v in balanced.query_variances()]  # type: ignore[attr-defined]
    assert balance.feasible and balance.rounds > 1 and balance.factors[0] == 1.0 and balance.factors[3] > 1.0
    for mean, own, ratio in zip(means, alone, balance.ratios):
        assert mean <= BASELINE_FACTOR * own * (1 + 1e-6) and ratio == pytest.approx(mean / (BASELINE_FACTOR * own))
    assert means[0] > plain_means[0]
    assert balanced.privacy == Privacy.laplace(1.0)  # type: ignore[attr-defined]


def test_a_balanced_workload_is_planned_once_as_it_is() -> None:
    """Grouping sets already below their baselines (the coarse ones weighted up): one round, weights kept."""
    workload = _cube((1.0, 1.0, 2.0, 3.0))
    balanced, balance = plan_balanced(workload, [[0], [1], [2], [3]], Privacy.laplace(1.0), _make)
    assert balance.rounds == 1 and balance.factors == (1.0, 1.0, 1.0, 1.0) and balance.feasible
    assert balanced.expected_error() == pytest.approx(_make(workload, Privacy.laplace(1.0)).expected_error())  # type: ignore[attr-defined]
