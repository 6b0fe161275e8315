"""p-Identity (ε-DP): objective and gradient against dense brute force, the integer strategy's exact
sensitivity and variances, exact noise-free answers, empirical error, and the gain over hats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from range_checks import (
    assert_empirical_error_matches_prediction,
    assert_noise_free_answers_exact,
    assert_variances_equal_dense_gls,
)

from planner import (
    AllRange,
    Domain,
    Explicit,
    Factor,
    Identity,
    Predicate,
    Prefix,
    Privacy,
    Product,
    Workload,
)
from planner.budget import Sensitivity
from planner.strategies import hats, pidentity
from planner.strategies.ranges import range_layouts
from planner.workload import Total


def mixed_workload(size: int) -> Workload:
    """Every kind of block on the ordered attribute: ranges, a non-interval predicate, total, cells."""
    dom = Domain({"sex": 2, "age": size}, ordered={"age"})
    mask = np.zeros(size, dtype=bool)
    mask[[0, 3, 4, size - 1]] = True
    return Workload(dom, (
        Product(dom, (Factor(("sex",), Identity(2)), Factor(("age",), AllRange(size)))),
        Product(dom, (Factor(("age",), Prefix(size)),), 0.5),
        Product(dom, (Factor(("age",), Predicate(mask)),)),
        Product(dom, (Factor(("sex",), Identity(2)), Factor(("age",), Total(size)))),
        Product(dom, (Factor(("age",), Identity(size)),), 2.0),
    ))


def dense_gram(workload: Workload) -> np.ndarray:
    """``Σ_p w² ‖W_o‖²_F B_pᵀB_p`` on the ordered attribute, from the dense workload matrix."""
    (layout,) = range_layouts(workload)
    return sum(p.weight**2 * layout.other_mass(p) * layout.ordered_block(p).gram() for p in workload.products)


@pytest.mark.parametrize("explicit_rows", [0, 30])
def test_gram_operator_equals_the_dense_gram(explicit_rows: int) -> None:
    """With 30 explicit rows (more rows than 20 cells) the operator applies their Gram densely."""
    workload = mixed_workload(20)
    if explicit_rows:
        rows = Explicit(np.random.default_rng(3).normal(size=(explicit_rows, 20)))
        workload = workload + Workload(workload.domain, (Product(workload.domain, (Factor(("age",), rows),), 1.5),))
    (layout,) = range_layouts(workload)
    operator = pidentity.GramOperator(layout)
    assert (operator.factor is None) == (explicit_rows > 20)
    gram = dense_gram(workload)
    assert operator(np.eye(20)) == pytest.approx(gram, rel=1e-12)
    assert operator.diagonal == pytest.approx(np.diag(gram), rel=1e-12)


def test_objective_and_gradient_equal_brute_force() -> None:
    size, p = 20, 3
    workload = mixed_workload(size)
    (layout,) = range_layouts(workload)
    operator = pidentity.GramOperator(layout)
    theta = np.random.default_rng(5).uniform(0, 1, (p, size))
    value, gradient = pidentity.objective(theta.ravel(), operator)

    def brute(t: np.ndarray) -> float:
        strategy = np.vstack([np.eye(size), t.reshape(p, size)]) / (1 + t.reshape(p, size).sum(axis=0))
        assert np.abs(strategy).sum(axis=0) == pytest.approx(np.ones(size))  # L1 sensitivity 1
        return float(np.trace(dense_gram(workload) @ np.linalg.inv(strategy.T @ strategy)))

    assert value == pytest.approx(brute(theta.ravel()), rel=1e-10)
    step = 1e-6
    numeric = [
        (brute(theta.ravel() + step * e) - brute(theta.ravel() - step * e)) / (2 * step) for e in np.eye(p * size)
    ]
    assert gradient == pytest.approx(np.array(numeric), rel=1e-5, abs=1e-6 * np.abs(numeric).max())


def test_integer_strategy_sensitivity_variances_and_exact_answers() -> None:
    workload = mixed_workload(24)
    epsilon, contributions = 0.8, 2
    (candidate,) = pidentity.candidates(workload, Privacy.laplace(epsilon), contributions)
    rows = candidate.rows
    assert rows.dtype == np.int64 and (rows >= 0).all() and rows.any(axis=1).all()
    column_sums = rows.sum(axis=0)
    assert candidate.magnitude == column_sums.max()
    assert abs(column_sums.max() - 2**pidentity.SCALE_BITS) <= rows.shape[0]  # rounding moves sums by < ½ per row
    assert candidate.noise.parameter == pytest.approx(contributions * candidate.magnitude / epsilon, rel=1e-15)
    (group,) = candidate.group_budgets()
    assert group.budget == epsilon and group.rows == 2 * rows.shape[0]
    b = candidate.noise.parameter  # the noise module rounds scales up to a dyadic rational: b ≈ 3e5 here
    assert candidate.noise.variance == pytest.approx(2 * math.exp(-1 / b) / (1 - math.exp(-1 / b)) ** 2, rel=1e-6)
    assert_variances_equal_dense_gls(candidate, workload, rows, candidate.noise.variance * np.eye(rows.shape[0]))
    data = np.random.default_rng(6).integers(0, 100, size=(2, 24))
    assert_noise_free_answers_exact(candidate, workload, data, tolerance=1e-6)


def test_empirical_error_matches_the_prediction() -> None:
    """800 independent repetitions within 4 standard errors of the prediction."""
    assert_empirical_error_matches_prediction(pidentity.candidates, Privacy.laplace(1.0), 16, high=50, data_seed=2, noise_seed=9)


@pytest.mark.parametrize("kind, gain", [(AllRange, 0.98), (Prefix, 0.92)])
def test_p_identity_beats_hats(kind: type, gain: float) -> None:
    size = 256
    dom = Domain({"age": size}, ordered={"age"})
    workload = Workload(dom, (Product(dom, (Factor(("age",), kind(size)),)),))
    (hat,) = hats.candidates(workload, Privacy.laplace(1.0))
    (candidate,) = pidentity.candidates(workload, Privacy.laplace(1.0))
    assert candidate.expected_error() < gain * hat.expected_error()


def test_only_for_laplace_and_mid_sized_attributes() -> None:
    small = Domain({"age": pidentity.MIN_SIZE - 1}, ordered={"age"})
    assert pidentity.candidates(Workload.all_range(small, "age"), Privacy.laplace(1.0)) == []
    dom = Domain({"age": 64}, ordered={"age"})
    assert pidentity.candidates(Workload.all_range(dom, "age"), Privacy.zcdp(1.0)) == []


def test_the_start_keeps_the_coarsest_hat_levels_that_fit() -> None:
    dom = Domain({"age": 64}, ordered={"age"})
    (hat,) = hats.candidates(Workload.all_range(dom, "age"), Privacy.laplace(1.0))
    fine = hats.HatCandidate(hat.layout, hat.privacy, Sensitivity(1), 2, [64, 16, 2, 1], np.array([0.1, 0.2, 0.3, 0.4]))
    start = pidentity.hat_start(fine)  # the 33 rows of spacing 2 would exceed the n/8 = 8 rows allowed
    assert start == pytest.approx(np.vstack([np.full((1, 64), 0.25), hats.hat_rows(64, 16) / 32]), rel=1e-14)


def test_every_cell_keeps_a_leaf_row_of_the_least_weight() -> None:
    theta = np.array([[1e9, 3.0, 0.0], [0.0, 1.0, 0.0]])
    rows = pidentity.integer_strategy(theta)
    scale = 2**pidentity.SCALE_BITS
    assert np.array_equal(np.diag(rows[:3]), [round(scale * pidentity.MIN_LEAF_WEIGHT), scale // 5, scale])
    assert np.array_equal(rows[3:], [[scale - 256, round(scale * 3 / 5), 0], [0, round(scale / 5), 0]])


def test_optimised_theta_and_tree_shares_are_memoized_across_budgets() -> None:
    """Θ and a tree's budget shares do not depend on ε: asking again (a composite part at its share, a
    Kronecker factor in another round, hats and p-Identity re-deriving the box tree) reuses them, also
    for a start that differs in its last bits; clear_caches() forgets them."""
    from planner import caches
    from planner.strategies import hierarchy

    caches.clear_caches()
    workload = Workload.all_range(Domain({"t": 48}, ordered={"t"}), "t")
    (layout,) = range_layouts(workload)
    start = pidentity.hat_start(hats.candidates(workload, Privacy.laplace(1.0))[0])
    first = pidentity.optimised_theta(layout, start)
    again = pidentity.optimised_theta(layout, start * (1 + 2.0**-52))
    assert len(pidentity._THETA_CACHE) == 1 and np.array_equal(first, again)
    budgets = [hierarchy.hierarchy_candidate(layout, Privacy.laplace(e), 1, 4).budgets / e for e in (1.0, 0.3)]
    np.testing.assert_allclose(*budgets, rtol=1e-15)  # one optimisation, scaled to each ε
    caches.clear_caches()
    assert not pidentity._THETA_CACHE and not hierarchy._SHARES_CACHE
