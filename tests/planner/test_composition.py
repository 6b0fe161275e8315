"""The budget split between measurements of different data composed in one statement: shares that minimise
the total expected error, ε ∝ V^(1/3) under pure DP and ρ ∝ √V under zCDP."""

from __future__ import annotations

import numpy as np
import pytest

from planner import composition_shares


def _total(errors: np.ndarray, shares: np.ndarray, laplace: bool) -> float:
    """The statement's total expected error when part i spends shares[i] of the budget (errors at the whole)."""
    return float(np.sum(errors / shares**2)) if laplace else float(np.sum(errors / shares))


@pytest.mark.parametrize("laplace, power", [(True, 1 / 3), (False, 1 / 2)])
def test_shares_follow_the_closed_form(laplace: bool, power: float) -> None:
    errors = np.array([1.0, 8.0, 27.0, 0.5])
    shares = np.array(composition_shares(errors, laplace=laplace))
    expected = errors**power / np.sum(errors**power)
    assert shares == pytest.approx(expected, rel=1e-12) and shares.sum() == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize("laplace", [True, False])
def test_no_other_split_has_a_smaller_total_error(laplace: bool) -> None:
    rng = np.random.default_rng(0)
    errors = rng.uniform(0.1, 100.0, size=4)
    best = _total(errors, np.array(composition_shares(errors, laplace=laplace)), laplace)
    assert best < _total(errors, np.full(4, 0.25), laplace)  # strictly better than an equal split
    for _ in range(200):
        other = rng.dirichlet(np.ones(4))
        assert best <= _total(errors, other, laplace) * (1 + 1e-12)


def test_a_part_without_error_keeps_a_positive_share() -> None:
    shares = composition_shares([0.0, 4.0], laplace=True)
    assert 0 < shares[0] <= 1e-6 and sum(shares) == pytest.approx(1.0)
