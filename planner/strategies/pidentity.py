"""p-Identity strategies for ranges under ε-DP (HDMM's parameterisation, Laplace version).

The strategy is ``A = [I; Θ] · diag(1/c)`` with ``Θ ∈ ℝ₊^{p×n}`` and ``c_j = 1 + Σ_i Θ_ij``, so every
column of ``A`` has L1 norm exactly 1 (the ε-DP sensitivity). With ``G = Σ_p w² ‖W_o‖²_F B_pᵀB_p`` the
workload Gram on the ordered attribute, the expected error is ``(2/ε²) f(Θ)`` with

    f(Θ) = tr(C G C X),   C = diag(c),   X = (I + ΘᵀΘ)⁻¹ = I − Θᵀ Y,   Y = (I_p + ΘΘᵀ)⁻¹ Θ

(Woodbury; note ``Θ X = Y``). Its gradient is ``∂f/∂Θ = −2 Y G̃ X + 2·1 dᵀ`` with ``G̃ = C G C`` and
``d_k = (G C X)_kk``; each evaluation costs two products of ``G`` with ``n × p`` matrices, which for
prefixes, all ranges, identities and totals take ``O(n p)`` by cumulative sums (:class:`GramOperator`).

``Θ`` starts from the hat hierarchy of ``planner.strategies.hats`` (its non-leaf hat rows, scaled by
their budgets relative to the leaves', at most ``n/8`` rows; one hat level every ``⌈√n⌉`` cells when
none fits), and is improved by L-BFGS-B with ``Θ ≥ 0``. The real strategy
is then scaled by ``2^SCALE_BITS`` and rounded to integers; the sensitivity (largest integer column
sum), the discrete Laplace noise and the GLS covariance ``v (SᵀS)⁻¹`` are those of the rounded matrix,
so the stated error is exact for what is released. All rows get the same noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner import caches
from planner.budget import GroupNoise, Sensitivity, noise_for_group, sample_noise
from planner.privacy import Privacy
from planner.strategies import hats
from planner.strategies.base import Candidate, GroupBudget, Measurement
from planner.strategies.ranges import DenseCovariance, GramOperator, RangeCandidate, RangeLayout
from planner.workload import Workload

MAX_SIZE = hats.MAX_SIZE  # dense n × n GLS of the rounded strategy
MIN_SIZE = 16  # below this the hats (or boxes) are as good and the optimisation is not worth it
MAX_ITERATIONS = 120  # L-BFGS-B iterations (n = 1024: about a second)
SCALE_BITS = 16  # the real strategy (entries ≤ 1) is scaled by 2^16 before rounding
MIN_LEAF_WEIGHT = 2.0**-8  # least weight of a cell's identity row in the released strategy
GROUP = "p-identity rows"
CHOLESKY_ENTRIES = 1 << 15  # larger systems of the objective are solved by Cholesky (see _spd_solve)


@dataclass(frozen=True)
class PairNoise:
    """The covariance of the noise on a block of strategy rows, in units of 2b² (so i.i.d. Laplace of
    scale b is the identity): 2 × 2 blocks ``[[α, β], [β, α]]`` on the row pairs (0, 1), (2, 3), … and,
    for an odd count, 1 on the last row. ``PairNoise(m)`` is i.i.d. Laplace; :meth:`ridge` is the ridge
    pair of ``planner.noise`` at width ``w = 2h/b`` in its continuous limit (what the optimiser uses)."""

    size: int
    alpha: float = 1.0
    beta: float = 0.0

    @classmethod
    def ridge(cls, size: int, width: float) -> PairNoise:
        total = 2.0 + 4.0 / (2.0 + width)  # Var(Y₁+Y₂)/b², Var(Y₁−Y₂)/b²
        difference = (width**3 / 3.0 + 2.0 * width**2 + 6.0 * width + 8.0) / (2.0 + width)
        return cls(size, (total + difference) / 8.0, (total - difference) / 8.0)

    @property
    def paired(self) -> int:
        """Rows in pairs: ``2⌊size/2⌋``."""
        return self.size - self.size % 2

    def __matmul__(self, matrix: np.ndarray) -> np.ndarray:
        return self._mixed(matrix, 0)

    def right_of(self, matrix: np.ndarray) -> np.ndarray:
        """``matrix @ N`` (columns mixed in pairs): ``(N matrixᵀ)ᵀ`` without transposing a copy."""
        return self._mixed(matrix, 1)

    def _mixed(self, matrix: np.ndarray, axis: int) -> np.ndarray:
        """``matrix`` with its pairs of rows (``axis`` 0) or columns (1) mixed by the 2 × 2 blocks."""
        result = matrix.copy()
        moved, mixed = np.moveaxis(matrix, axis, 0), np.moveaxis(result, axis, 0)
        even, odd = moved[0 : self.paired : 2], moved[1 : self.paired : 2]
        mixed[0 : self.paired : 2] = self.alpha * even + self.beta * odd
        mixed[1 : self.paired : 2] = self.beta * even + self.alpha * odd
        return result

    def diagonal(self) -> np.ndarray:
        diagonal = np.ones(self.size)
        diagonal[: self.paired] = self.alpha
        return diagonal

    def partners(self) -> np.ndarray:
        """Each row's partner (itself when unpaired)."""
        index = np.arange(self.size)
        index[: self.paired] ^= 1
        return index

    def offdiagonal(self) -> np.ndarray:
        """``N[j, partner(j)]`` per row (0 when unpaired)."""
        off = np.zeros(self.size)
        off[: self.paired] = self.beta
        return off

    def dense(self) -> np.ndarray:
        return self @ np.eye(self.size)


def objective(
    theta: np.ndarray, gram: GramOperator, cell_noise: PairNoise | None = None, row_noise: PairNoise | None = None
) -> tuple[float, np.ndarray]:
    """``f(Θ)`` and its gradient (module docstring) when the noise on the cell rows ``I`` has covariance
    ``N`` = ``cell_noise`` and on the rows ``Θ`` ``M`` = ``row_noise`` (:class:`PairNoise`, i.i.d. Laplace
    by default):

        f(Θ) = tr(G̃ X),  X = (N⁻¹ + ΘᵀM⁻¹Θ)⁻¹ = N − NΘᵀY,  Y = (M + ΘNΘᵀ)⁻¹ΘN = M⁻¹ΘX,
        ∂f/∂Θ = −2 Y G̃ X + 2·1 dᵀ,  d_j = (G C X)_jj.

    ``theta`` is ``Θ`` flattened; ``N`` is applied in O(n) per column, so the cost stays O(n p)."""
    terms = _ObjectiveTerms(theta, gram, cell_noise, row_noise)
    c, Y, GCNT, cells = terms.c, terms.Y, terms.GCNT, terms.cells
    GCY = gram(c[:, None] * Y.T)  # G C Yᵀ
    YGNT = Y @ (c[:, None] * GCNT)  # Y G̃ N Θᵀ
    gradient = -2.0 * ((cells @ (c[:, None] * GCY)).T - YGNT @ Y)
    gradient += 2.0 * (terms.gcn_diagonal - np.sum(GCNT * Y.T, axis=1))[None, :]
    return terms.value, gradient.ravel()


def objective_value(
    theta: np.ndarray, gram: GramOperator, cell_noise: PairNoise | None = None, row_noise: PairNoise | None = None
) -> float:
    """``f(Θ)`` alone (:func:`objective` without the gradient)."""
    return _ObjectiveTerms(theta, gram, cell_noise, row_noise).value


class _ObjectiveTerms:
    """What ``f`` and its gradient share: ``c``, ``Y``, ``G C N Θᵀ``, ``diag(G C N)`` and the value."""

    def __init__(self, theta: np.ndarray, gram: GramOperator, cell_noise: PairNoise | None, row_noise: PairNoise | None) -> None:
        n = gram.size
        T = theta.reshape(-1, n)
        self.cells = cell_noise or PairNoise(n)
        rows = row_noise or PairNoise(T.shape[0])
        self.c = c = 1.0 + T.sum(axis=0)
        NT = self.cells.right_of(T).T  # N Θᵀ = (Θ N)ᵀ, N symmetric
        self.Y = _spd_solve(rows.dense() + T @ NT, NT.T)
        self.GCNT = gram(c[:, None] * NT)  # G C N Θᵀ
        partners = self.cells.partners()
        self.gcn_diagonal = (
            gram.diagonal * c * self.cells.diagonal() + gram.partner_entries(partners) * c[partners] * self.cells.offdiagonal()
        )
        self.value = float(np.sum(c * self.gcn_diagonal) - np.sum(self.Y.T * (c[:, None] * self.GCNT)))


def _spd_solve(matrix: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``matrix⁻¹ right`` for the positive definite ``M + ΘNΘᵀ``: by Cholesky when ``right`` has more than
    ``CHOLESKY_ENTRIES`` entries (n = 1,024, p = 70: 2.7× faster than LU), by LU below (the optimiser's path,
    hence the strategy, of smaller designs is kept exactly as it was)."""
    if right.size <= CHOLESKY_ENTRIES:
        return np.linalg.solve(matrix, right)
    from scipy.linalg import cho_factor, cho_solve  # loaded with scipy.optimize, which calls this

    return cho_solve(cho_factor(matrix), right)


def optimised_theta(layout: RangeLayout, start: np.ndarray) -> np.ndarray:
    """L-BFGS-B on ``f`` from ``start`` with ``Θ ≥ 0`` (deterministic). ``f`` does not depend on ε, so
    the result is memoized by the workload Gram and the start (rounded to 12 decimals: hat budgets
    computed at another ε differ in their last bits) — re-planning a part at its budget share (composite)
    or a factor in another round (Kronecker) costs nothing."""
    start = np.round(start, 12)
    gram = GramOperator(layout)
    key = (gram.signature(), start.shape, start.tobytes())
    return _THETA_CACHE.get(key, lambda: _descended(start, gram))


def _descended(start: np.ndarray, gram: GramOperator) -> np.ndarray:
    from scipy.optimize import minimize  # imported when first needed (~0.3 s)

    result = minimize(
        objective, start.ravel(), args=(gram,), jac=True, method="L-BFGS-B",
        bounds=nonnegative(start.size), options={"maxiter": MAX_ITERATIONS},
    )
    return np.maximum(result.x, 0.0).reshape(start.shape)


def nonnegative(size: int) -> list[tuple[float, None]]:
    """``Θ ≥ 0`` as L-BFGS-B's own bounds (one pair per entry): the same bounds as ``Bounds(0, inf)``,
    which ``minimize`` would first turn into these pairs and back (~0.03 s for ``n = 1024, p = 74``)."""
    return [(0.0, None)] * size


_THETA_CACHE = caches.ArrayMemo(size=16)  # n = 1024, p = 74: 0.6 MB each


def max_rows(size: int) -> int:
    """The most rows ``Θ`` may have: each objective evaluation costs ``O(n p²)``."""
    return max(8, size // 8)


def hat_start(candidate: hats.HatCandidate) -> np.ndarray | None:
    """``Θ`` equal to a hat hierarchy: its non-leaf rows, coarsest levels first while they fit in
    :func:`max_rows`, scaled by ``(ε_ℓ/C_ℓ)/ε_leaves``. When no such level fits, hats every ``⌈√n⌉``
    cells at the leaves' budget; None when the hierarchy does not measure the leaves."""
    if 1 not in candidate.spacings:
        return None
    n = candidate.layout.size
    leaves = candidate.budgets[candidate.spacings.index(1)]
    levels: list[np.ndarray] = []
    for spacing, budget, rows in sorted(zip(candidate.spacings, candidate.budgets, candidate.rows), key=lambda l: -l[0]):
        if spacing == 1 or sum(level.shape[0] for level in levels) + rows.shape[0] > max_rows(n):
            break
        levels.append(rows * (budget / hats.magnitude(n, spacing) / leaves))
    if not levels:
        spacing = math.isqrt(n - 1) + 1
        levels = [hats.hat_rows(n, spacing) / hats.magnitude(n, spacing)]
    return np.vstack(levels).astype(float)


def integer_strategy(theta: np.ndarray) -> np.ndarray:
    """``round(2^SCALE_BITS · [I; Θ] diag(1/c))``, without rows that round to zero. Columns of ``Θ``
    summing to more than ``1/MIN_LEAF_WEIGHT − 1`` are scaled down first, so every cell keeps a leaf row of
    weight ``≥ MIN_LEAF_WEIGHT`` and the GLS stays well conditioned (such cells carry almost no error)."""
    sums = theta.sum(axis=0)
    bounded = theta * np.minimum(1.0, (1.0 / MIN_LEAF_WEIGHT - 1.0) / np.maximum(sums, 1e-300))
    c = 1.0 + bounded.sum(axis=0)
    real = np.vstack([np.diag(1.0 / c), bounded / c])
    rows = np.rint(real * 2**SCALE_BITS).astype(np.int64)
    return rows[rows.any(axis=1)]


@dataclass(frozen=True, eq=False)
class StrategyCovariance(DenseCovariance):
    """``Σ_t = v (SᵀS)⁻¹`` for integer rows ``S`` that all receive noise of variance ``v``."""

    rows: np.ndarray
    variance: float

    @property
    def size(self) -> int:  # type: ignore[override]
        return self.rows.shape[1]

    @cached_property
    def _matrix(self) -> np.ndarray:
        return self.variance * hats.gram_inverse(self.rows.astype(float))

    def matrix(self) -> np.ndarray:
        return self._matrix


class PIdentityCandidate(RangeCandidate):
    """Integer p-Identity rows per cell of the other attributes, one noise scale, dense GLS."""

    def __init__(self, layout: RangeLayout, privacy: Privacy, sensitivity: Sensitivity, rows: np.ndarray) -> None:
        super().__init__(layout, privacy)
        self.rows = rows
        self.name = f"p-identity(p={rows.shape[0] - layout.size})"
        self.magnitude = int(np.abs(rows).sum(axis=0).max())  # exact L1 sensitivity of one row
        self.noise: GroupNoise = noise_for_group(privacy, privacy.epsilon, sensitivity, self.magnitude)

    @cached_property
    def covariance(self) -> StrategyCovariance:
        return StrategyCovariance(self.rows, self.noise.variance)

    def group_budgets(self) -> tuple[GroupBudget, ...]:
        rows = self.layout.other_cells * self.rows.shape[0]
        return (GroupBudget(GROUP, rows, self.privacy.epsilon, self.noise.variance),)

    def measure(self, marginals: Mapping[tuple[str, ...], np.ndarray], rng: object = None, noise: bool = True) -> Measurement:
        values = self.layout.leaves(marginals) @ self.rows.T  # exact integers (other cells, rows)
        if noise:
            values = values + sample_noise(self.privacy, np.full(values.size, self.noise.parameter), rng).reshape(values.shape)
        return Measurement(self.name, {GROUP: values}, {GROUP: np.full(values.shape, self.noise.variance)}, self.privacy)

    def estimate(self, measurement: Measurement) -> np.ndarray:
        weighted = np.asarray(measurement.values[GROUP], dtype=float) @ self.rows.astype(float)
        return weighted @ self.covariance.matrix() / self.noise.variance


def hat_starts(workload: Workload, privacy: Privacy, contributions: int = 1) -> list[tuple[RangeLayout, np.ndarray]]:
    """``(layout, Θ start)`` per ordered attribute where p-Identity applies: ε-DP, a hat hierarchy that
    measures the leaves, ``MIN_SIZE`` to ``MAX_SIZE`` cells (also the ridge family's starts)."""
    if not privacy.is_laplace:
        return []
    found: list[tuple[RangeLayout, np.ndarray]] = []
    for hat in hats.candidates(workload, privacy, contributions):
        start = hat_start(hat) if isinstance(hat, hats.HatCandidate) else None
        if start is not None and MIN_SIZE <= hat.layout.size <= MAX_SIZE:
            found.append((hat.layout, start))
    return found


def candidates(workload: Workload, privacy: Privacy, contributions: int = 1) -> list[Candidate]:
    """A p-Identity strategy per ordered attribute that has a hat hierarchy (see :func:`hat_starts`)."""
    return [
        PIdentityCandidate(layout, privacy, Sensitivity(contributions), integer_strategy(optimised_theta(layout, start)))
        for layout, start in hat_starts(workload, privacy, contributions)
    ]
