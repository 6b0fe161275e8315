"""Workload-adaptive strategy optimization by projected gradient descent (docs/math.md §8, McKenna et al. 2020 §4).

The objective is `L(Q) = tr[(QᵀD⁻¹Q)⁻¹ WᵀW]`, `D = diag(Q 1)`: the average-case variance up to
constants when `V` is optimal for `Q`. The ε-LDP constraints are handled through an auxiliary vector
`z` of row minima, `z ≤ Q[:, u] ≤ e^ε z`, `1ᵀ Q[:, u] = 1`; each iteration takes a gradient step on `Q`,
a (smaller) step on `z` along the gradient of `L(Π_z(Q))` with respect to `z`, and projects `Q`
column by column onto the bounded simplex defined by the new `z`. Steps that do not decrease `L` are
rejected and the step size halved; accepted steps grow it.

Example:
    >>> import numpy as np
    >>> from planner.ldp import optimize, randomized_response
    >>> prefix = np.tril(np.ones((8, 8)))
    >>> best = optimize(prefix, 1.0, seed=0)
    >>> best.worst_case_variance(1) < randomized_response(prefix, 1.0).worst_case_variance(1)
    True
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TextIO

import numpy as np
import scipy.linalg

from planner.ldp.factorization import (
    Factorization,
    as_workload_matrix,
    check_epsilon,
    factorize,
)
from planner.ldp.projection import project_bounded_simplex, project_row_minima
from planner.ldp.protocols import classic_protocols, randomized_response_matrix
from planner.threads import one_blas_thread

SINGULAR_PIVOT_RATIO = 1e-7
"""`QᵀD⁻¹Q` counts as singular when a Cholesky pivot is this small relative to the largest."""

ProgressCallback = Callable[[int, int, float], None]
"""Called as `progress(iterations_done, iterations_total, best_objective)`."""


@dataclass(frozen=True)
class ObjectiveValue:
    """`L(Q)` and its gradient with respect to `Q` (`inf` and `None` if `QᵀD⁻¹Q` is singular)."""

    value: float
    gradient: np.ndarray | None


def objective_and_gradient(Q: np.ndarray, workload_gram: np.ndarray) -> ObjectiveValue:
    """`L(Q) = tr[X WᵀW]`, `X = (QᵀD⁻¹Q)⁻¹`, and `∇L = −2 D⁻¹ Q B + (diag(Q B Qᵀ) ⊘ d²) 1ᵀ`, `B = X WᵀW X`."""
    row_mass = Q.sum(axis=1)
    inverse_mass = np.divide(1.0, row_mass, out=np.zeros_like(row_mass), where=row_mass > 0)
    gram = Q.T @ (Q * inverse_mass[:, None])
    try:
        factor = scipy.linalg.cho_factor(gram, check_finite=False)
    except np.linalg.LinAlgError:
        return ObjectiveValue(math.inf, None)
    pivots = np.abs(np.diag(factor[0]))
    if pivots.min() <= SINGULAR_PIVOT_RATIO * pivots.max():
        return ObjectiveValue(math.inf, None)
    x_times_workload = scipy.linalg.cho_solve(factor, workload_gram, check_finite=False)
    value = float(np.trace(x_times_workload))
    if not math.isfinite(value) or value <= 0:
        return ObjectiveValue(math.inf, None)
    middle = scipy.linalg.cho_solve(factor, x_times_workload.T, check_finite=False)  # B = X WᵀW X
    q_middle = Q @ middle
    gradient = -2.0 * inverse_mass[:, None] * q_middle + (
        np.einsum("ij,ij->i", q_middle, Q) * inverse_mass**2
    )[:, None]
    return ObjectiveValue(value, gradient)


def row_minimum_gradient(projected: np.ndarray, z: np.ndarray, gradient: np.ndarray, epsilon: float) -> np.ndarray:
    """Gradient of `z ↦ L(Π_z(P))`, by the chain rule through Π, given `projected = Π_z(P)` and
    `gradient = ∇L(projected)` (an approximation of it may be passed).

    In column `u` an entry clipped to its lower bound moves one-for-one with `z_o`, one clipped to its
    upper bound moves `e^ε`-for-one, and the free entries shift together (by `λ`) to keep the sum 1; so
    `∂L/∂z_o = Σ_u (g_ou − ḡ_u) · (1[at lower] + e^ε 1[at upper])`, `ḡ_u` the mean gradient over the
    free entries of column `u`. (At a fixed point `P = Π_z(P)` entries sit exactly on the kinks and
    this is only a one-sided derivative; the descent evaluates it after the gradient step on `Q`.)
    """
    lower = z[:, None]
    upper = math.exp(epsilon) * lower
    at_lower = projected <= lower
    at_upper = (projected >= upper) & ~at_lower
    free = ~(at_lower | at_upper)
    free_count = free.sum(axis=0)
    free_mean = np.divide(
        np.where(free, gradient, 0.0).sum(axis=0), free_count, out=np.zeros(projected.shape[1]), where=free_count > 0
    )
    centred = gradient - free_mean[None, :]
    return (centred * (at_lower + math.exp(epsilon) * at_upper)).sum(axis=1)


def project_strategy(unconstrained: np.ndarray, z: np.ndarray, epsilon: float) -> np.ndarray:
    """Π_z: each column onto `{z ≤ q ≤ e^ε z, Σ q = 1}`."""
    return project_bounded_simplex(unconstrained, z, math.exp(epsilon) * z, 1.0)


@dataclass(frozen=True)
class DescentRun:
    """One projected-gradient-descent run: final strategy and the objective after each iteration."""

    Q: np.ndarray
    objective_log: tuple[float, ...]


def projected_gradient_descent(
    Q: np.ndarray,
    z: np.ndarray,
    workload_gram: np.ndarray,
    epsilon: float,
    iterations: int,
    row_minimum_step_ratio: float,
    on_iteration: Callable[[float], None] | None = None,
) -> DescentRun:
    """Minimize `L` from the feasible pair `(Q, z)` with adaptive step sizes."""
    current = objective_and_gradient(Q, workload_gram)
    if current.gradient is None:
        raise ValueError("the starting strategy Q is rank deficient; start from a full-rank strategy")
    step = 0.1 / (Q.shape[0] * np.abs(current.gradient).max())
    log: list[float] = []
    for _ in range(iterations):
        stepped = Q - step * current.gradient
        z_gradient = row_minimum_gradient(project_strategy(stepped, z, epsilon), z, current.gradient, epsilon)
        trial_z = project_row_minima(z - row_minimum_step_ratio * step * z_gradient, epsilon)
        trial_Q = project_strategy(stepped, trial_z, epsilon)
        trial = objective_and_gradient(trial_Q, workload_gram)
        if trial.value < current.value:
            Q, z, current = trial_Q, trial_z, trial
            step *= 1.5
        else:
            step *= 0.5
        log.append(current.value)
        if on_iteration is not None:
            on_iteration(current.value)
    return DescentRun(Q, tuple(log))


def random_start(num_outputs: int, num_types: int, epsilon: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random feasible `(Q, z)`: uniform entries projected onto the constraints of a uniform `z`."""
    z = np.full(num_outputs, math.exp(-epsilon / 2) / num_outputs)
    return project_strategy(rng.uniform(size=(num_outputs, num_types)), z, epsilon), z


def randomized_response_start(
    num_outputs: int, num_types: int, epsilon: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Randomized response spread over `num_outputs` rows (copies of it), slightly perturbed."""
    copies = -(-num_outputs // num_types)
    stacked = np.vstack([randomized_response_matrix(num_types, epsilon)] * copies)[:num_outputs]
    stacked *= rng.uniform(0.9, 1.1, size=stacked.shape)
    stacked /= stacked.sum(axis=0, keepdims=True)
    z = project_row_minima(stacked.min(axis=1), epsilon)
    return project_strategy(stacked, z, epsilon), z


class TextProgressBar:
    """A one-line progress bar on a text stream (stderr by default), for `optimize(progress=True)`."""

    def __init__(self, stream: TextIO | None = None, width: int = 30) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.width = width

    def __call__(self, done: int, total: int, best: float) -> None:
        filled = self.width * done // max(total, 1)
        self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}  objective {best:.6g}")
        if done == total:
            self.stream.write("\n")
        self.stream.flush()


@one_blas_thread
def optimize(
    workload: np.ndarray,
    epsilon: float,
    *,
    seed: int | np.random.Generator | None = None,
    num_outputs: int | None = None,
    restarts: int = 3,
    iterations: int = 400,
    row_minimum_step_ratio: float = 1e-4,
    compare_with_classic: bool = True,
    progress: bool | ProgressCallback = False,
) -> Factorization:
    """The workload-adapted ε-LDP factorization mechanism for `workload` (dense `W` or `.dense()`).

    Runs `restarts` projected-gradient-descent runs over an `m × n` strategy (`m = num_outputs`,
    default `4n`): the first starts from randomized response, the rest from random strategies. Keeps
    the one with the lowest worst-case variance. With `compare_with_classic`, the classic protocols
    are evaluated too and the best of them is returned (saying so in `.log`) if it beats the
    optimized strategy; an item-set protocol comes without a dense `Q` but with its `.scheme`, which
    `design`/`Mechanism` can deploy. `progress=True` draws a progress bar on stderr; a callable
    receives `(done, total, best_objective)` instead. The result's `log` lists each run's objective.
    `row_minimum_step_ratio` scales the step on `z` relative to the step on `Q` (the `z` gradient sums
    over all columns, so it is much larger; small ratios keep the descent stable).
    """
    W = as_workload_matrix(workload)
    epsilon = check_epsilon(epsilon)
    rng = np.random.default_rng(seed)
    num_types = W.shape[1]
    outputs = 4 * num_types if num_outputs is None else int(num_outputs)
    if outputs < num_types:
        raise ValueError(f"num_outputs must be at least the number of user types ({num_types}), got {outputs}")
    if restarts < 1 or iterations < 0:
        raise ValueError("restarts must be ≥ 1 and iterations ≥ 0")
    workload_gram = W.T @ W
    report = TextProgressBar() if progress is True else (progress or None)
    total_iterations = restarts * iterations
    state = {"done": 0, "best": math.inf}

    def tick(value: float) -> None:
        state["done"] += 1
        state["best"] = min(state["best"], value)
        if report is not None and (state["done"] % 10 == 0 or state["done"] == total_iterations):
            report(state["done"], total_iterations, state["best"])

    best: Factorization | None = None
    log: list[str] = []
    for restart in range(restarts):
        start = randomized_response_start if restart == 0 else random_start
        Q, z = start(outputs, num_types, epsilon, rng)
        run = projected_gradient_descent(Q, z, workload_gram, epsilon, iterations, row_minimum_step_ratio, tick)
        candidate = factorize(run.Q, W, epsilon, "optimized")
        objectives = run.objective_log or (candidate.objective,)
        log.append(
            f"restart {restart} ({start.__name__}): objective {objectives[0]:.6g} -> {objectives[-1]:.6g}, "
            f"worst-case variance per user {candidate.worst_case_variance(1):.6g}"
        )
        log.append("objective log: " + " ".join(f"{value:.6g}" for value in _thin(objectives)))
        if best is None or candidate.worst_case_variance(1) < best.worst_case_variance(1):
            best = candidate
    assert best is not None
    if compare_with_classic:
        for classic in classic_protocols(W, epsilon).values():
            if classic.worst_case_variance(1) < best.worst_case_variance(1):
                log.append(
                    f"classic protocol {classic.name} has lower worst-case variance "
                    f"({classic.worst_case_variance(1):.6g} < {best.worst_case_variance(1):.6g}); returning it"
                )
                best = classic
    return best.with_log(*log)


def _thin(values: Iterable[float], keep: int = 50) -> list[float]:
    """At most `keep` evenly spaced entries of `values` (always the last)."""
    values = list(values)
    stride = max(1, -(-len(values) // keep))
    thinned = values[::stride]
    return thinned if thinned[-1] == values[-1] else thinned + [values[-1]]
