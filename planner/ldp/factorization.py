"""Workload factorization mechanisms (docs/math.md §8, McKenna et al. 2020 §3).

Each user of type `u ∈ {0..n-1}` reports output `o ∈ {0..m-1}` with probability `Q[o, u]`; the
analyst estimates the workload answers `W x` as `V y` from the response counts `y`, which is unbiased
whenever `V Q = W`. Everything the variance formulas need is the matrix of per-query second moments
`S[i, u] = Σ_o Q[o, u] V[i, o]²` (what one user of type `u` adds to `E[(V y)_i²]`), so a
`Factorization` stores `S` and keeps `Q`, `V` only when the output space is small enough to hold them
densely (protocols such as unary encoding have `2ⁿ` outputs and supply `S` in closed form).

Example:
    >>> import numpy as np
    >>> from planner.ldp.factorization import Factorization, optimal_reconstruction
    >>> Q = np.array([[0.75, 0.25], [0.25, 0.75]])          # randomized response, ε = ln 3
    >>> f = Factorization(Q, optimal_reconstruction(Q, np.eye(2)))
    >>> round(f.worst_case_variance(1000), 6)                # 1000 · 2 · (3/16) / (1/4)
    1500.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.ldp.errors import InvalidEpsilonError, InvalidStrategyError, WorkloadNotSupportedError

if TYPE_CHECKING:
    from planner.ldp.item_sets import ItemSetScheme

SUM_TOLERANCE = 1e-9
"""How far a column of `Q` may sum from 1 (floating point), and the relative slack on `e^ε`."""


def check_epsilon(epsilon: float) -> float:
    """Return `epsilon` as a float, or raise `InvalidEpsilonError` if it is not finite and positive."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating, np.integer)):
        raise InvalidEpsilonError(f"epsilon must be a positive number, got {epsilon!r}")
    value = float(epsilon)
    if not math.isfinite(value) or value <= 0:
        raise InvalidEpsilonError(f"epsilon must be finite and > 0 for local differential privacy, got {value}")
    return value


def as_workload_matrix(workload: Any) -> np.ndarray:
    """The dense `q × n` workload matrix of `workload` (a 2-D array or anything with `.dense()`)."""
    dense = workload.dense() if hasattr(workload, "dense") else workload
    try:
        matrix = np.array(dense, dtype=float)
    except (TypeError, ValueError) as error:
        raise WorkloadNotSupportedError(f"the workload must be a numeric matrix: {error}") from None
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise WorkloadNotSupportedError(
            f"the workload must be a non-empty 2-D matrix (queries × user types), got shape {matrix.shape}"
        )
    if not np.all(np.isfinite(matrix)):
        raise WorkloadNotSupportedError("the workload matrix contains NaN or infinite entries")
    return matrix


def privacy_loss(Q: np.ndarray) -> float:
    """The smallest ε for which `Q` is ε-LDP: `max_o log(max_u Q[o,u] / min_u Q[o,u])`.

    All-zero rows (outputs that never occur) cost nothing; a row that is zero for some types and
    positive for others has infinite loss.
    """
    row_max = Q.max(axis=1)
    row_min = Q.min(axis=1)
    used = row_max > 0
    if np.any(row_min[used] <= 0):
        return math.inf
    if not np.any(used):
        return 0.0
    return float(np.max(np.log(row_max[used]) - np.log(row_min[used])))


def validate_strategy(Q: Any, epsilon: float | None = None) -> np.ndarray:
    """Return `Q` as a float matrix after checking it is a (ε-LDP, if `epsilon` given) randomizer."""
    matrix = np.array(Q, dtype=float)
    if matrix.ndim != 2 or matrix.size == 0:
        raise InvalidStrategyError(f"Q must be a non-empty 2-D matrix (outputs × user types), got shape {matrix.shape}")
    if not np.all(np.isfinite(matrix)):
        raise InvalidStrategyError("Q contains NaN or infinite entries")
    if np.any(matrix < -1e-12):
        raise InvalidStrategyError(f"Q must be non-negative; smallest entry is {matrix.min():.3g}")
    matrix = np.maximum(matrix, 0.0)
    column_error = np.max(np.abs(matrix.sum(axis=0) - 1.0))
    if column_error > SUM_TOLERANCE:
        raise InvalidStrategyError(
            f"each column of Q must be a probability distribution summing to 1; worst column is off by {column_error:.3g}"
        )
    if epsilon is not None:
        bound = check_epsilon(epsilon)
        loss = privacy_loss(matrix)
        if loss > bound + SUM_TOLERANCE:
            raise InvalidStrategyError(
                f"Q is only {loss:.6g}-LDP, not {bound:.6g}-LDP: some output is more than e^ε times likelier "
                "for one user type than for another"
            )
    return matrix


def optimal_reconstruction(Q: np.ndarray, W: np.ndarray) -> np.ndarray:
    """The `V` minimizing `tr(V D Vᵀ)` subject to `V Q = W`: `V = W (QᵀD⁻¹Q)⁺ QᵀD⁻¹`, `D = diag(Q 1)`.

    Raises `WorkloadNotSupportedError` if `W` is not in the row space of `Q` (no unbiased `V` exists).
    """
    if W.shape[1] != Q.shape[1]:
        raise WorkloadNotSupportedError(
            f"the workload has {W.shape[1]} columns but the strategy covers {Q.shape[1]} user types"
        )
    row_mass = Q.sum(axis=1)
    inverse_mass = np.divide(1.0, row_mass, out=np.zeros_like(row_mass), where=row_mass > 0)
    scaled = Q * inverse_mass[:, None]
    gram = Q.T @ scaled
    eigenvalues, eigenvectors = np.linalg.eigh(gram)
    cutoff = eigenvalues.max() * Q.shape[1] * 1e-12
    inverse = np.divide(1.0, eigenvalues, out=np.zeros_like(eigenvalues), where=eigenvalues > cutoff)
    pseudo_inverse = (eigenvectors * inverse) @ eigenvectors.T
    V = W @ pseudo_inverse @ scaled.T
    residual = np.max(np.abs(V @ Q - W))
    if residual > 1e-7 * max(1.0, np.max(np.abs(W))):
        raise WorkloadNotSupportedError(
            f"the workload is not in the row space of the strategy Q (residual {residual:.3g}): no unbiased "
            "estimator exists; use a strategy whose outputs distinguish every user type the workload needs"
        )
    return V


@dataclass(frozen=True, eq=False)
class Factorization:
    """A workload factorization mechanism `W = V Q` and its exact variances.

    Build it from dense matrices, `Factorization(Q, V)` (validated; `epsilon` defaults to the actual
    privacy loss of `Q`), or, for protocols whose output space is too large, from the workload and the
    closed-form second moments: `Factorization(None, None, epsilon, name, W=W, query_second_moments=S)`.
    Item-set protocols also carry their client randomizer in `scheme`.
    """

    Q: np.ndarray | None
    V: np.ndarray | None
    epsilon: float | None = None
    name: str = "factorization"
    log: tuple[str, ...] = ()
    W: np.ndarray | None = None
    query_second_moments: np.ndarray | None = field(default=None, repr=False)
    scheme: ItemSetScheme | None = None
    """For item-set protocols: the client randomizer (which can be deployed without a dense `Q`)."""

    def __post_init__(self) -> None:
        if self.Q is None or self.V is None:
            self._init_implicit()
            return
        Q = validate_strategy(self.Q, self.epsilon)
        V = np.array(self.V, dtype=float)
        if V.ndim != 2 or V.shape[1] != Q.shape[0]:
            raise WorkloadNotSupportedError(
                f"V must have one column per output of Q ({Q.shape[0]}), got shape {V.shape}"
            )
        W = V @ Q
        if self.W is not None and not np.allclose(W, self.W, atol=1e-8):
            raise WorkloadNotSupportedError("V Q does not equal the given workload W: the estimator is biased")
        object.__setattr__(self, "Q", Q)
        object.__setattr__(self, "V", V)
        object.__setattr__(self, "W", W)
        object.__setattr__(self, "epsilon", privacy_loss(Q) if self.epsilon is None else check_epsilon(self.epsilon))
        object.__setattr__(self, "query_second_moments", (V * V) @ Q)

    def _init_implicit(self) -> None:
        if self.Q is not None or self.V is not None:
            raise InvalidStrategyError("give both Q and V, or neither (then W and query_second_moments)")
        if self.W is None or self.query_second_moments is None or self.epsilon is None:
            raise InvalidStrategyError("an implicit factorization needs epsilon, W and query_second_moments")
        W = as_workload_matrix(self.W)
        moments = np.array(self.query_second_moments, dtype=float)
        if moments.shape != W.shape:
            raise InvalidStrategyError(f"query_second_moments must have the workload's shape {W.shape}")
        object.__setattr__(self, "W", W)
        object.__setattr__(self, "query_second_moments", moments)
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))

    @property
    def num_types(self) -> int:
        return self.W.shape[1]

    @property
    def num_queries(self) -> int:
        return self.W.shape[0]

    @property
    def per_query_type_variance(self) -> np.ndarray:
        """`A[i, u]`: variance one user of type `u` adds to the estimate of query `i`."""
        return self.query_second_moments - self.W**2

    @property
    def per_type_variance(self) -> np.ndarray:
        """Total workload variance one user of type `u` adds: `Σ_o Q[o,u] ‖V[:,o]‖² − ‖W[:,u]‖²`."""
        return self.query_second_moments.sum(axis=0) - (self.W**2).sum(axis=0)

    @property
    def objective(self) -> float:
        """The optimizer's objective `tr(V D Vᵀ)` (= `tr[(QᵀD⁻¹Q)⁻¹WᵀW]` for the optimal `V`)."""
        return float(self.query_second_moments.sum())

    def variance(self, x: np.ndarray) -> float:
        """Expected total squared error on data vector `x` (user counts per type)."""
        return float(np.asarray(x, dtype=float) @ self.per_type_variance)

    def query_variances(self, x: np.ndarray) -> np.ndarray:
        """Variance of each workload answer on data vector `x`."""
        return self.per_query_type_variance @ np.asarray(x, dtype=float)

    def worst_case_variance(self, num_users: float) -> float:
        """Total variance when all `num_users` users have the worst type."""
        return float(num_users * self.per_type_variance.max())

    def average_case_variance(self, num_users: float) -> float:
        """Total variance when the `num_users` users are spread uniformly over the types."""
        return float(num_users * self.per_type_variance.mean())

    def normalized_variance(self, num_users: float) -> float:
        """Worst-case variance per query on the normalized data vector `x / N`."""
        return self.worst_case_variance(num_users) / (self.num_queries * float(num_users) ** 2)

    def sample_complexity(self, target_normalized_variance: float) -> float:
        """Number of users needed for a worst-case normalized variance of `target_normalized_variance`."""
        if not target_normalized_variance > 0:
            raise ValueError(f"the target normalized variance must be > 0, got {target_normalized_variance}")
        return float(self.per_type_variance.max() / (self.num_queries * target_normalized_variance))

    def with_log(self, *lines: str) -> Factorization:
        """A copy with `lines` appended to the log."""
        return replace(self, log=self.log + lines)


def factorize(Q: np.ndarray, W: np.ndarray, epsilon: float | None, name: str, log: tuple[str, ...] = ()) -> Factorization:
    """The factorization of `W` through strategy `Q` with the optimal reconstruction."""
    strategy = validate_strategy(Q, epsilon)
    return Factorization(strategy, optimal_reconstruction(strategy, W), epsilon, name, log)
