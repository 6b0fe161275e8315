"""Factorization: validation, exact variances, optimal reconstruction, sample complexity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.ldp import (
    Factorization,
    InvalidEpsilonError,
    InvalidStrategyError,
    WorkloadNotSupportedError,
    optimal_reconstruction,
    randomized_response,
)
from planner.ldp.factorization import as_workload_matrix, privacy_loss
from planner.ldp.protocols import randomized_response_matrix
from planner.ldp.workloads import histogram, prefix


def random_strategy(num_outputs: int, num_types: int, seed: int) -> np.ndarray:
    Q = np.random.default_rng(seed).uniform(0.5, 1.5, size=(num_outputs, num_types))
    return Q / Q.sum(axis=0)


def test_variance_formulas_match_a_direct_multinomial_computation() -> None:
    Q = random_strategy(7, 4, seed=1)
    W = np.random.default_rng(2).normal(size=(5, 4))
    V = optimal_reconstruction(Q, W)
    factorization = Factorization(Q, V)
    counts = np.array([3.0, 0.0, 5.0, 2.0])
    # Var(V y) for y = Σ_u Multinomial(x_u, Q[:, u]): covariance Σ_u x_u (diag(q_u) − q_u q_uᵀ)
    covariance = sum(counts[u] * (np.diag(Q[:, u]) - np.outer(Q[:, u], Q[:, u])) for u in range(4))
    expected = np.diag(V @ covariance @ V.T)
    np.testing.assert_allclose(factorization.query_variances(counts), expected, rtol=1e-10)
    assert factorization.variance(counts) == pytest.approx(expected.sum(), rel=1e-10)
    per_type = [Factorization(Q, V).variance(np.eye(4)[u]) for u in range(4)]
    assert factorization.worst_case_variance(10) == pytest.approx(10 * max(per_type))
    assert factorization.average_case_variance(10) == pytest.approx(10 * np.mean(per_type))
    D = np.diag(Q.sum(axis=1))
    assert factorization.average_case_variance(4) == pytest.approx(np.trace(V @ D @ V.T) - np.sum(W**2))


def test_optimal_reconstruction_beats_other_unbiased_estimators_and_matches_objective() -> None:
    Q = random_strategy(9, 4, seed=3)
    W = prefix(4)
    best = Factorization(Q, optimal_reconstruction(Q, W))
    pseudo_inverse = Factorization(Q, W @ np.linalg.pinv(Q))
    np.testing.assert_allclose(pseudo_inverse.W, W, atol=1e-12)
    assert best.average_case_variance(1) < pseudo_inverse.average_case_variance(1)
    D_inverse = np.diag(1 / Q.sum(axis=1))
    objective = np.trace(np.linalg.inv(Q.T @ D_inverse @ Q) @ W.T @ W)
    assert best.objective == pytest.approx(objective, rel=1e-10)


def test_normalized_variance_and_sample_complexity() -> None:
    epsilon, num_types = 1.0, 16
    rr = randomized_response(histogram(num_types), epsilon)
    boost = math.exp(epsilon)
    per_user = (num_types - 1) * (2 * boost + num_types - 2) / (boost - 1) ** 2
    users = 5000
    assert rr.normalized_variance(users) == pytest.approx(per_user / (num_types * users))
    target = 0.01
    needed = rr.sample_complexity(target)
    assert needed == pytest.approx(per_user / (num_types * target))
    assert rr.normalized_variance(needed) == pytest.approx(target)
    with pytest.raises(ValueError, match="target"):
        rr.sample_complexity(0.0)


def test_privacy_loss_and_epsilon_validation() -> None:
    Q = randomized_response_matrix(5, 0.7)
    assert privacy_loss(Q) == pytest.approx(0.7)
    assert Factorization(Q, np.linalg.inv(Q)).epsilon == pytest.approx(0.7)
    with pytest.raises(InvalidStrategyError, match="only 0.7"):
        Factorization(Q, np.linalg.inv(Q), epsilon=0.5)
    for bad in [0, -1.0, math.inf, math.nan, "1", True]:
        with pytest.raises(InvalidEpsilonError):
            randomized_response(histogram(3), bad)


@pytest.mark.parametrize(
    ("Q", "message"),
    [
        (np.array([[0.5, 0.6], [0.5, 0.4]]) * [[1, 1], [1, 1.1]], "sum"),
        (np.array([[1.2, 0.5], [-0.2, 0.5]]), "non-negative"),
        (np.array([[1.0, 0.5], [0.0, 0.5]]), "LDP"),
        (np.array([[np.nan, 0.5], [0.5, 0.5]]), "NaN"),
        (np.ones(3), "2-D"),
    ],
)
def test_invalid_strategies_are_rejected(Q: np.ndarray, message: str) -> None:
    with pytest.raises(InvalidStrategyError, match=message):
        Factorization(Q, np.eye(2), epsilon=1.0)


def test_workload_outside_row_space_is_rejected() -> None:
    Q = np.array([[0.6, 0.6, 0.4], [0.4, 0.4, 0.6]])  # types 0 and 1 are indistinguishable
    with pytest.raises(WorkloadNotSupportedError, match="row space"):
        optimal_reconstruction(Q, np.eye(3))
    total_only = optimal_reconstruction(Q, np.ones((1, 3)))  # the total is always estimable
    np.testing.assert_allclose(total_only @ Q, np.ones((1, 3)), atol=1e-12)
    with pytest.raises(WorkloadNotSupportedError, match="columns"):
        optimal_reconstruction(Q, np.eye(4))


def test_workload_input_forms() -> None:
    class Dense:
        def dense(self) -> np.ndarray:
            return prefix(3)

    np.testing.assert_array_equal(as_workload_matrix(Dense()), prefix(3))
    assert as_workload_matrix([1, 2, 3]).shape == (1, 3)
    for bad in [np.zeros((0, 3)), [[1, np.inf]], [["a"]], np.zeros((2, 2, 2))]:
        with pytest.raises(WorkloadNotSupportedError):
            as_workload_matrix(bad)


def test_implicit_factorization_needs_consistent_inputs() -> None:
    with pytest.raises(InvalidStrategyError, match="both"):
        Factorization(np.eye(2), None)
    with pytest.raises(InvalidStrategyError, match="shape"):
        Factorization(None, None, 1.0, "x", W=np.eye(2), query_second_moments=np.ones((3, 2)))
    implicit = Factorization(None, None, 1.0, "x", W=np.eye(2), query_second_moments=np.full((2, 2), 2.0))
    assert implicit.worst_case_variance(3) == pytest.approx(3 * (4 - 1))
    assert implicit.with_log("note").log == ("note",)
