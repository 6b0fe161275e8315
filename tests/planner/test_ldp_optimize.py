"""Strategy optimization: gradients, projection, and the optimizer's results."""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest

from planner.ldp import classic_protocols, optimize, randomized_response
from planner.ldp.optimize import (
    objective_and_gradient,
    project_strategy,
    random_start,
    row_minimum_gradient,
)
from planner.ldp.projection import project_bounded_simplex, project_row_minima
from planner.ldp.workloads import all_range, histogram, prefix


def finite_difference(function, point: np.ndarray, step: float = 1e-6) -> np.ndarray:
    gradient = np.zeros_like(point)
    for index in np.ndindex(point.shape):
        offset = np.zeros_like(point)
        offset[index] = step
        gradient[index] = (function(point + offset) - function(point - offset)) / (2 * step)
    return gradient


def test_objective_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    Q = rng.uniform(0.2, 1.0, size=(7, 4))
    W = rng.normal(size=(5, 4))
    gram = W.T @ W
    result = objective_and_gradient(Q, gram)
    D_inverse = np.diag(1 / Q.sum(axis=1))
    assert result.value == pytest.approx(np.trace(np.linalg.inv(Q.T @ D_inverse @ Q) @ gram), rel=1e-12)
    numeric = finite_difference(lambda P: objective_and_gradient(P, gram).value, Q)
    np.testing.assert_allclose(result.gradient, numeric, rtol=1e-5, atol=1e-6 * np.abs(numeric).max())


def test_row_minimum_gradient_matches_finite_differences_through_the_projection() -> None:
    rng = np.random.default_rng(1)
    epsilon, num_outputs = 1.0, 8
    W = rng.normal(size=(5, 4))
    gram = W.T @ W
    z = rng.uniform(0.5, 1.5, size=num_outputs)
    z *= math.exp(-epsilon / 2) / z.sum()
    unconstrained = rng.uniform(size=(num_outputs, 4)) * 0.3

    def composed(minima: np.ndarray) -> float:
        return objective_and_gradient(project_strategy(unconstrained, minima, epsilon), gram).value

    projected = project_strategy(unconstrained, z, epsilon)
    assert np.any(projected <= z[:, None]) and np.any(projected >= math.exp(epsilon) * z[:, None])
    analytic = row_minimum_gradient(projected, z, objective_and_gradient(projected, gram).gradient, epsilon)
    numeric = finite_difference(composed, z, step=1e-8)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-6 * np.abs(numeric).max())


def test_singular_strategy_has_infinite_objective() -> None:
    Q = np.array([[0.5, 0.5], [0.5, 0.5]])
    assert objective_and_gradient(Q, np.eye(2)).value == math.inf


@pytest.mark.parametrize("seed", range(4))
def test_projection_is_feasible_and_euclidean(seed: int) -> None:
    rng = np.random.default_rng(seed)
    epsilon, num_outputs, columns = [0.5, 1.0, 2.0, 4.0][seed], 9, 6
    z = rng.uniform(0.3, 1.0, size=num_outputs)
    z *= rng.uniform(math.exp(-epsilon), 1.0) / z.sum()
    values = rng.normal(scale=0.5, size=(num_outputs, columns))
    projected = project_bounded_simplex(values, z, math.exp(epsilon) * z)
    assert np.all(projected >= z[:, None]) and np.all(projected <= math.exp(epsilon) * z[:, None])
    np.testing.assert_allclose(projected.sum(axis=0), 1.0, rtol=0, atol=1e-12)
    for column in range(columns):
        q = cp.Variable(num_outputs)
        problem = cp.Problem(
            cp.Minimize(cp.sum_squares(q - values[:, column])), [q >= z, q <= math.exp(epsilon) * z, cp.sum(q) == 1]
        )
        problem.solve(solver=cp.CLARABEL)
        np.testing.assert_allclose(projected[:, column], q.value, atol=1e-6)  # solver accuracy
        assert np.sum((projected[:, column] - values[:, column]) ** 2) <= problem.value + 1e-9


def test_projection_large_feasible_and_infeasible_input() -> None:
    rng = np.random.default_rng(5)
    z = np.full(400, math.exp(-1) / 400 * 1.5)
    projected = project_bounded_simplex(rng.uniform(size=(400, 50)) * 10, z, math.e * z)
    assert np.abs(projected.sum(axis=0) - 1).max() <= 1e-12
    assert projected.min() >= z.min() and np.all(projected <= math.e * z[:, None])
    with pytest.raises(ValueError, match="infeasible"):
        project_bounded_simplex(np.zeros((3, 1)), np.full(3, 0.5), np.full(3, 1.0))
    minima = project_row_minima(np.array([0.9, 0.8, -0.3]), 1.0)
    assert minima.sum() == pytest.approx(1.0) and minima.min() >= 0


def test_optimized_strategy_is_ldp_and_beats_classic_protocols_on_prefix() -> None:
    W, epsilon = prefix(16), 1.0
    result = optimize(W, epsilon, seed=0, restarts=2, iterations=200, compare_with_classic=False)
    assert result.Q.shape == (64, 16)
    assert result.epsilon == epsilon
    ratios = result.Q.max(axis=1) / result.Q.min(axis=1)
    assert ratios.max() <= math.exp(epsilon) * (1 + 1e-9)
    np.testing.assert_allclose(result.V @ result.Q, W, atol=1e-8)
    best_classic = min(protocol.worst_case_variance(1) for protocol in classic_protocols(W, epsilon).values())
    assert result.worst_case_variance(1) < 0.85 * best_classic
    assert any(line.startswith("objective log") for line in result.log)


def test_objective_log_decreases_and_runs_are_reproducible() -> None:
    W = all_range(8)
    first = optimize(W, 1.0, seed=3, restarts=1, iterations=60, compare_with_classic=False)
    second = optimize(W, 1.0, seed=3, restarts=1, iterations=60, compare_with_classic=False)
    np.testing.assert_array_equal(first.Q, second.Q)
    values = [float(value) for value in next(line for line in first.log if line.startswith("objective log")).split()[2:]]
    assert values == sorted(values, reverse=True) and values[-1] < values[0]


def test_fallback_to_classic_protocol_is_logged() -> None:
    W, epsilon = histogram(4), 4.0  # randomized response is optimal at large ε
    unoptimized = optimize(W, epsilon, seed=0, restarts=1, iterations=0, compare_with_classic=False)
    rr = randomized_response(W, epsilon)
    assert unoptimized.worst_case_variance(1) > rr.worst_case_variance(1)  # a perturbed copy of RR
    result = optimize(W, epsilon, seed=0, restarts=1, iterations=0)
    assert result.worst_case_variance(1) == pytest.approx(rr.worst_case_variance(1), rel=1e-9)
    assert any(line.startswith("classic protocol") and line.endswith("returning it") for line in result.log)


def test_progress_callback_and_argument_checks() -> None:
    calls: list[tuple[int, int]] = []
    optimize(histogram(3), 1.0, seed=0, restarts=1, iterations=20, progress=lambda done, total, best: calls.append((done, total)))
    assert calls[-1] == (20, 20)
    with pytest.raises(ValueError, match="num_outputs"):
        optimize(histogram(3), 1.0, num_outputs=2)
    with pytest.raises(ValueError, match="restarts"):
        optimize(histogram(3), 1.0, restarts=0)


def test_random_start_is_feasible() -> None:
    Q, z = random_start(12, 3, 0.5, np.random.default_rng(0))
    np.testing.assert_allclose(Q.sum(axis=0), 1.0, atol=1e-12)
    assert np.all(Q >= z[:, None]) and np.all(Q <= math.exp(0.5) * z[:, None])
