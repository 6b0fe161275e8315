"""The exact budget check (``planner.budget.within``): shares sum to at most the spec in rational
arithmetic, computed once on integers, never inside an optimisation loop."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import planner.budget as budget
from planner import Domain, Privacy, Workload
from planner.budget import BudgetError, exact_sum, within
from planner.strategies.marginals import BudgetProblem


def fits(shares: np.ndarray, total: float) -> bool:
    return sum(map(Fraction, np.asarray(shares, dtype=float).tolist())) <= Fraction(total)


def float_checked(shares: np.ndarray, total: float) -> np.ndarray:
    """A deliberately broken ``within``: trusts a correctly rounded float sum."""
    result = np.array(shares, dtype=float)
    while math.fsum(result) > total:
        largest = int(np.argmax(result))
        result[largest] = math.nextafter(result[largest], 0.0)
    return result


def test_exact_sum_equals_the_sum_of_fractions_over_every_exponent() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate([
        rng.random(4000),
        rng.random(500) * 2.0 ** rng.integers(-1070, 1000, 500),  # subnormals to huge
        [0.0, 5e-324, 2.0**-1022, 1.0, 0.1, 1e300],
    ])
    assert exact_sum(values) == sum(map(Fraction, values.tolist()))
    assert exact_sum(np.array([])) == 0


def test_a_split_whose_rounded_sum_fits_but_whose_exact_sum_does_not_is_lowered() -> None:
    total = 1.0
    shares = np.array([0.5, 0.5, 2.0**-60])  # 1 + 2^-60 rounds to 1.0: every float sum says it fits
    assert math.fsum(shares) == total and not fits(shares, total)
    assert not fits(float_checked(shares, total), total)  # the broken variant releases an overspend
    fitted = within(shares, total)
    assert fits(fitted, total)
    lowered = np.flatnonzero(fitted != shares)
    assert lowered.size == 1 and shares[lowered[0]] == shares.max()
    # the least lowering: one float more would overspend again
    nudged = fitted.copy()
    nudged[lowered[0]] = math.nextafter(fitted[lowered[0]], math.inf)
    assert not fits(nudged, total)


def test_thousands_of_shares_fit_exactly_with_one_share_changed() -> None:
    rng = np.random.default_rng(11)
    overspent = 0
    for total in (1.0, 0.3, 2.5, 1e-3):
        for size in (2, 97, 5051) * 5:
            weights = rng.random(size) ** 3
            naive = total * weights / weights.sum()
            overspent += not fits(naive, total)
            fitted = within(naive, total)
            assert fits(fitted, total)
            assert np.count_nonzero(fitted != naive) <= 1
            np.testing.assert_allclose(fitted, naive, rtol=1e-12, atol=0)
    assert overspent >= 10  # the inputs do exercise the lowering


def test_budgets_far_over_the_spec_or_not_finite_are_refused() -> None:
    with pytest.raises(BudgetError, match="more than rounding"):
        within([0.6, 0.6], 1.0)
    with pytest.raises(BudgetError, match="finite"):
        within([0.5, math.nan], 1.0)
    with pytest.raises(BudgetError, match="finite"):
        within([1.5, -0.5], 1.0)


@pytest.mark.parametrize("privacy", [Privacy.laplace(1.0), Privacy.zcdp(0.3)])
def test_the_budget_alternation_checks_exactly_once_per_solve(privacy: Privacy, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact check runs on the final split only: not in every one of the alternation's steps."""
    calls = []
    counting = exact_sum

    def counted(values: np.ndarray) -> Fraction:
        calls.append(len(values))
        return counting(values)

    monkeypatch.setattr(budget, "exact_sum", counted)
    workload = Workload.all_kway(Domain({"a": 3, "b": 4, "c": 5, "d": 2, "e": 6}), 2)
    problem = BudgetProblem(workload, privacy, budget.Sensitivity())
    kept, shares, _ = problem.solve([p.attributes for p in workload.products])
    assert 1 <= len(calls) <= 2  # the check, and a re-check when it had to lower a share
    assert fits(shares, privacy.epsilon if privacy.is_laplace else privacy.rho)
