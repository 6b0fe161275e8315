"""b-ary hierarchies over an ordered attribute (docs/math.md §5), per-level budgets (§2), tree GLS (§3).

The ``size`` ordered cells are padded with structural zeros to ``N = Π fanouts`` leaves (``b`` per level,
the root's fanout reduced so that little padding is needed). Level ``ℓ`` (root ``ℓ = 0`` … leaves ``ℓ = h``)
sums blocks of ``s_ℓ`` consecutive leaves; each level is one group with ``C = 1`` and per-row noise ``v_ℓ``.

Why the GLS is linear-time and every variance closed-form: with ``E_ℓ`` the projection onto vectors that
are constant on level-ℓ blocks (block means), ``A_ℓᵀA_ℓ = s_ℓ E_ℓ``, the ``E_ℓ`` are nested and commute,
so the precision ``P = Σ_ℓ (s_ℓ/v_ℓ) E_ℓ = Σ_k μ_k (E_k − E_{k−1})`` with ``μ_k = Σ_{ℓ≥k} s_ℓ/v_ℓ``, and

    Σ = P⁻¹ = Σ_ℓ c_ℓ E_ℓ,    c_ℓ = 1/μ_ℓ − 1/μ_{ℓ+1}   (1/μ_{h+1} = 0).

This is Hay et al.'s (2010) two-pass estimator in closed form for per-level variances: the GLS estimate
is ``x̂ = Σ_ℓ c_ℓ E_ℓ Σ_k A_kᵀ y_k / v_k`` (block sums up, block means down), ``O(N h)``. A query row
``r`` has variance ``Σ_ℓ c_ℓ q_ℓ(r)`` with ``q_ℓ(r) = Σ_blocks (r·1_block)² / s_ℓ``; for an interval only
its two end blocks are partial. The workload's error is ``E = Σ_ℓ c_ℓ m_ℓ`` with masses
``m_ℓ = Σ_products w² ‖W_o‖²_F Σ_rows q_ℓ`` (closed forms per block for prefixes and all ranges), and
the GLS recovery mass of level ``ℓ`` is ``a_ℓ = ∂E/∂v_ℓ = (s_ℓ/v_ℓ²) Σ_{k≤ℓ} (m_k − m_{k−1})/μ_k²``.

Budgets alternate with GLS (§3) from several starting points (the Laplace objective is not convex in
the ε_ℓ; sparse starts find the trees that skip levels), levels whose share vanishes are not measured
(the leaves always are), and the best tree over ``b ∈ BRANCHINGS`` is offered as ``hierarchy(b=…)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner import caches
from planner.budget import (
    GroupNoise,
    Sensitivity,
    noise_for_group,
    optimal_budgets,
    sample_noise,
    within,
)
from planner.privacy import Privacy
from planner.strategies.base import Candidate, GroupBudget, Measurement
from planner.strategies.ranges import (
    Intervals,
    OrderedCovariance,
    RangeCandidate,
    RangeLayout,
    block_rows,
    range_layouts,
)
from planner.workload import AllRange, Block, Identity, Prefix, Workload

BRANCHINGS = (2, 4, 8, 16, 32, 64)
MAX_ITERATIONS = 200
TOLERANCE = 1e-10  # stop alternating when an iteration improves the error by less than this fraction
RANDOM_STARTS = 8  # sparse random starting budgets (fixed seed: planning is deterministic)
FEW_INTERVALS = 8  # fewer intervals than size / this are priced level by level, without per-cell tables
PRUNE_SHARE = 2.0**-8  # a non-leaf level below this share is not measured, and the leaves keep at least it:
# shares down to 10⁻⁶ made the tree GLS ill-conditioned (variance ratios ~10¹²: noise-free answers off by
# 1e-2, stated variances by 1e-3); a level this small carries under 1e-5 of the information of a full one


# --------------------------------------------------------------------------------------------------
# The tree and its level masses.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    """Fanouts from the root down; level ``ℓ`` blocks hold ``block_sizes[ℓ]`` leaves."""

    size: int
    fanouts: tuple[int, ...]

    @classmethod
    def with_branching(cls, size: int, branching: int) -> Tree:
        """``b`` children per node below the root, as few root children as cover ``size`` cells."""
        if branching < 2:
            raise ValueError(f"a hierarchy needs a branching factor of at least 2, got {branching}")
        depth = max(1, math.ceil(math.log(size, branching) - 1e-12))
        below = branching ** (depth - 1)
        return cls(size, (math.ceil(size / below),) + (branching,) * (depth - 1))

    @property
    def padded(self) -> int:
        return math.prod(self.fanouts)

    @property
    def block_sizes(self) -> tuple[int, ...]:
        sizes = [self.padded]
        for fanout in self.fanouts:
            sizes.append(sizes[-1] // fanout)
        return tuple(sizes)

    @property
    def levels(self) -> int:
        return len(self.fanouts) + 1

    def level_sums(self, leaves: np.ndarray, level: int) -> np.ndarray:
        """Block sums at ``level`` of ``(…, padded)`` leaves."""
        block = self.block_sizes[level]
        return leaves.reshape(leaves.shape[:-1] + (self.padded // block, block)).sum(axis=-1)

    def interval_masses(self, rows: Intervals, level: int) -> np.ndarray:
        """``q_ℓ(r) = Σ_blocks |r ∩ block|² / s_ℓ`` for every interval (``level`` an int, or an array of
        levels broadcasting against the intervals)."""
        block = np.asarray(self.block_sizes)[level]
        first, last = rows.lows // block, rows.highs // block
        left = ((first + 1) * block - rows.lows).astype(float)
        right = (rows.highs - last * block + 1).astype(float)
        split = (left**2 + right**2) / block + (last - first - 1) * block.astype(float)
        return np.where(first == last, rows.lengths**2 / block, split)

    def dense_masses(self, rows: np.ndarray, level: int) -> np.ndarray:
        block = self.block_sizes[level]
        padded = np.zeros((rows.shape[0], self.padded))
        padded[:, : self.size] = rows
        return (self.level_sums(padded, level) ** 2).sum(axis=1) / block

    def block_masses(self, block: Block) -> np.ndarray:
        """``Σ_rows q_ℓ`` per level: closed forms for prefixes, all ranges and the identity; a block of a
        few intervals (a WHERE range) in ``O(rows · levels)``, never ``O(size)``."""
        if isinstance(block, (AllRange, Prefix)):
            return np.array([self._closed_form_mass(block, level) for level in range(self.levels)])
        if isinstance(block, Identity):
            return self.size / np.asarray(self.block_sizes, dtype=float)
        rows = block_rows(block)
        if isinstance(rows, Intervals):
            levels = np.arange(self.levels)[:, None]
            return self.interval_masses(rows, levels).sum(axis=1)
        return np.array([float(self.dense_masses(rows, level).sum()) for level in range(self.levels)])

    def _closed_form_mass(self, block: AllRange | Prefix, level: int) -> float:
        """``Σ_rows q_ℓ`` of all ranges or all prefixes, one term per level-ℓ block."""
        n, width = self.size, self.block_sizes[level]
        starts = np.arange(0, n, width, dtype=float)
        real = np.minimum(width, n - starts)  # cells of each block inside the domain
        squares = real * (real + 1) * (2 * real + 1) / 6  # Σ_{l ≤ s'} l²
        if isinstance(block, AllRange):
            pairs = (real + 1) * squares - (real * (real + 1) / 2) ** 2  # Σ over inner intervals of len²
            after = n - starts - real + 1  # right ends available past the block
            node = pairs + (starts + after - 1) * squares + starts * (after - 1) * real**2
            return float(node.sum() / width)
        return float((squares + (n - starts - real) * real**2).sum() / width)


# --------------------------------------------------------------------------------------------------
# Per-level covariance algebra.
# --------------------------------------------------------------------------------------------------


def _inverse_precisions(tree: Tree, variances: np.ndarray) -> np.ndarray:
    """``1/μ_ℓ`` per level (``variances`` = ∞ for levels not measured)."""
    precision = np.asarray(tree.block_sizes, dtype=float) / variances
    return 1.0 / np.cumsum(precision[::-1])[::-1]


def level_weights(tree: Tree, variances: np.ndarray) -> np.ndarray:
    """``c_ℓ = 1/μ_ℓ − 1/μ_{ℓ+1}``: ``Σ = Σ_ℓ c_ℓ E_ℓ``."""
    inverse = _inverse_precisions(tree, variances)
    return inverse - np.append(inverse[1:], 0.0)


def tree_error(tree: Tree, variances: np.ndarray, masses: np.ndarray) -> float:
    return float(level_weights(tree, variances) @ masses)


def recovery_masses(tree: Tree, variances: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """``a_ℓ = ∂E/∂v_ℓ`` (zero for levels not measured)."""
    inverse = _inverse_precisions(tree, variances)
    increments = np.diff(masses, prepend=0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        gradient = np.cumsum(increments * inverse**2) * np.asarray(tree.block_sizes, dtype=float) / variances**2
    return np.where(np.isfinite(variances), gradient, 0.0)


@dataclass(frozen=True, eq=False)
class TreeCovariance(OrderedCovariance):
    """``Σ_t = Σ_ℓ c_ℓ E_ℓ`` of the tree GLS estimate."""

    tree: Tree
    level_variances: np.ndarray  # per level, ∞ where the level is not measured

    @property
    def size(self) -> int:  # type: ignore[override]
        return self.tree.size

    @cached_property
    def weights(self) -> np.ndarray:
        return level_weights(self.tree, self.level_variances)

    def _used_levels(self) -> list[int]:
        return [level for level, weight in enumerate(self.weights) if weight != 0.0]

    def variances(self, block: Block) -> np.ndarray:
        rows = block_rows(block)
        if isinstance(rows, Intervals):
            return self.interval_variances(rows)
        result = np.zeros(rows.shape[0])
        for level in self._used_levels():
            result += self.weights[level] * self.tree.dense_masses(rows, level)
        return result

    def interval_variances(self, rows: Intervals) -> np.ndarray:
        """``Σ_ℓ c_ℓ q_ℓ`` per interval: level by level for fewer intervals than ``size / FEW_INTERVALS``
        (WHERE ranges over 10⁶ cells need no ``O(n h)`` tables), else in O(1) each after ``O(n h)`` tables.

        With ``d`` the deepest level whose block holds both ends, levels ``ℓ ≤ d`` give ``len²/s_ℓ``
        and deeper levels give ``(left_ℓ(lo)² + right_ℓ(hi)²)/s_ℓ + s_ℓ(hi//s_ℓ − lo//s_ℓ − 1)``, a sum of
        a term in ``lo`` and a term in ``hi``: suffix sums over levels of those terms are tabulated."""
        if rows.lows.size * FEW_INTERVALS < self.tree.size:
            return self.weights @ self.tree.interval_masses(rows, np.arange(self.tree.levels)[:, None])
        low_terms, high_terms, shared = self._interval_tables
        depth = self._common_depth(rows.lows, rows.highs)
        result = rows.lengths
        result *= result
        result *= shared[depth]
        depth += 1
        result += low_terms[rows.lows, depth]
        result += high_terms[rows.highs, depth]
        return result

    @cached_property
    def _interval_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ``O(n h)`` tables of :meth:`interval_variances`, built once per covariance (a quantile's
        rank errors ask for them again per quantile)."""
        tree, weights = self.tree, self.weights
        sizes = np.asarray(tree.block_sizes)
        cells = np.arange(tree.size)
        low_terms = np.zeros((tree.size, tree.levels + 1))  # column d: Σ_{ℓ>d} of the lo-terms
        high_terms = np.zeros((tree.size, tree.levels + 1))
        for level in range(tree.levels - 1, -1, -1):
            width, weight = int(sizes[level]), weights[level]
            block = cells // width
            left = ((block + 1) * width - cells).astype(float)
            right = (cells - block * width + 1).astype(float)
            low_terms[:, level] = low_terms[:, level + 1] + weight * (left**2 / width - width * (block + 1.0))
            high_terms[:, level] = high_terms[:, level + 1] + weight * (right**2 / width + width * block)
        return low_terms, high_terms, np.cumsum(weights / sizes)  # the last: Σ_{ℓ≤d} c_ℓ/s_ℓ

    def _common_depth(self, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
        """The deepest level whose block contains both ``lows[i]`` and ``highs[i]``."""
        below_root = np.asarray(self.tree.block_sizes[1:], dtype=np.int64)
        if below_root.size and np.all(below_root & (below_root - 1) == 0):
            # power-of-two blocks: same block at size s iff lo ^ hi < s
            return np.searchsorted(-below_root, -(lows ^ highs), side="left").astype(np.int64)
        depth = np.zeros(lows.shape, dtype=np.int64)
        for width in below_root:
            depth += lows // width == highs // width
        return depth

    def trace(self, block: Block) -> float:
        return float(self.weights @ self.tree.block_masses(block))

    def estimate(self, level_values: Mapping[int, np.ndarray]) -> np.ndarray:
        """GLS leaves ``(…, padded)`` from noisy block sums per measured level (block sums up, means down)."""
        tree = self.tree
        first = next(iter(level_values.values()))
        weighted = np.zeros(first.shape[:-1] + (tree.padded,))
        for level, values in level_values.items():
            weighted += np.repeat(values / self.level_variances[level], tree.block_sizes[level], axis=-1)
        estimate = np.zeros_like(weighted)
        for level in self._used_levels():
            width = tree.block_sizes[level]
            means = tree.level_sums(weighted, level) / width
            estimate += self.weights[level] * np.repeat(means, width, axis=-1)
        return estimate


# --------------------------------------------------------------------------------------------------
# Budgets.
# --------------------------------------------------------------------------------------------------


def _continuous_variances(shares: np.ndarray, privacy: Privacy) -> np.ndarray:
    """Per-level variance (unit budget and one contribution) for budget shares; ∞ where unmeasured."""
    with np.errstate(divide="ignore"):
        return 2.0 / shares**2 if privacy.is_laplace else 1.0 / (2.0 * shares)


def _error_and_gradient(weights: np.ndarray, tree: Tree, masses: np.ndarray, privacy: Privacy) -> tuple[float, np.ndarray]:
    """Error for shares ``weights / Σ weights`` and its gradient in ``weights`` (via the precisions
    ``1/v_ℓ``: ``∂E/∂(1/v_ℓ) = −s_ℓ Σ_{k≤ℓ} (m_k − m_{k−1})/μ_k²``)."""
    total = weights.sum()
    shares = weights / total
    variances = _continuous_variances(shares, privacy)
    inverse = _inverse_precisions(tree, variances)
    if not np.isfinite(inverse).all():
        return math.inf, np.zeros_like(weights)
    error = float(level_weights(tree, variances) @ masses)
    by_precision = -np.asarray(tree.block_sizes, dtype=float) * np.cumsum(np.diff(masses, prepend=0.0) * inverse**2)
    by_share = by_precision * (shares if privacy.is_laplace else 2.0)  # d(1/v)/ds: s (Laplace), 2 (zCDP)
    return error, (by_share - by_share @ shares) / total


def _descend(tree: Tree, masses: np.ndarray, start: np.ndarray, privacy: Privacy) -> np.ndarray:
    from scipy.optimize import minimize  # here, not at module level: scipy.optimize costs ~0.3 s to import

    result = minimize(
        _error_and_gradient, start, args=(tree, masses, privacy), jac=True, method="L-BFGS-B",
        bounds=[(0.0, None)] * (tree.levels - 1) + [(1e-9, None)],
    )
    return _pruned(result.x / result.x.sum())


def _alternate(tree: Tree, masses: np.ndarray, shares: np.ndarray, privacy: Privacy) -> np.ndarray:
    """Closed-form budgets (§2) for the GLS recovery masses, then GLS for those budgets, until the error
    stops falling (docs/math.md §3)."""
    unit = Privacy.laplace(1.0) if privacy.is_laplace else Privacy.zcdp(1.0)
    error = tree_error(tree, _continuous_variances(shares, privacy), masses)
    for _ in range(MAX_ITERATIONS):
        recovery = recovery_masses(tree, _continuous_variances(shares, privacy), masses)
        proposal = _pruned(optimal_budgets(recovery, np.ones(tree.levels), unit))  # keeps the GLS well conditioned
        proposal_error = tree_error(tree, _continuous_variances(proposal, privacy), masses)
        if not proposal_error < error:
            break
        improvement = 1 - proposal_error / error
        shares, error = proposal, proposal_error
        if improvement < TOLERANCE:
            break
    return shares


def _pruned(shares: np.ndarray) -> np.ndarray:
    """Drop non-leaf levels with a negligible share; the leaves (needed for the tree estimate to be
    identifiable) keep at least ``PRUNE_SHARE`` so the tree GLS stays well conditioned."""
    kept = shares.copy()
    kept[:-1][kept[:-1] < PRUNE_SHARE] = 0.0
    kept /= kept.sum()
    if kept[-1] < PRUNE_SHARE:
        above = kept[:-1].sum()
        kept[:-1] *= (1.0 - PRUNE_SHARE) / above if above > 0 else 0.0
        kept[-1] = PRUNE_SHARE if above > 0 else 1.0
    return kept


def optimal_shares(tree: Tree, masses: np.ndarray, privacy: Privacy) -> np.ndarray:
    """Budget shares per level (summing to 1) minimising the continuous-noise GLS error.

    Gradient descent on the simplex from the uniform split and a few sparse random starts (the Laplace
    objective is not convex), each polished by budget ↔ GLS alternation; the best is kept. Shares do
    not depend on ε or ρ, only on the tree, the masses and the kind of noise: they are memoized (hats,
    p-Identity and composite parts ask for the same trees again)."""
    key = (tree, masses.tobytes(), privacy.is_laplace)
    return _SHARES_CACHE.get(key, lambda: _optimal_shares(tree, masses, privacy))


_SHARES_CACHE = caches.ArrayMemo(size=256)  # a few levels each


def _optimal_shares(tree: Tree, masses: np.ndarray, privacy: Privacy) -> np.ndarray:
    starts = [np.full(tree.levels, 1.0 / tree.levels)]
    rng = np.random.default_rng(0)
    for _ in range(RANDOM_STARTS if privacy.is_laplace and tree.levels > 2 else 0):
        starts.append(rng.dirichlet(np.full(tree.levels, 0.3)) + 1e-3)
    best, best_error = starts[0], math.inf
    for start in starts:
        shares = _pruned(_alternate(tree, masses, _descend(tree, masses, start / start.sum(), privacy), privacy))
        error = tree_error(tree, _continuous_variances(shares, privacy), masses)
        if error < best_error:
            best, best_error = shares, error
    return best


# --------------------------------------------------------------------------------------------------
# The candidate.
# --------------------------------------------------------------------------------------------------


def level_name(level: int) -> str:
    return f"level {level}"


class HierarchyCandidate(RangeCandidate):
    """A tree per cell of the other attributes, per-level budgets, tree GLS."""

    def __init__(
        self, layout: RangeLayout, privacy: Privacy, sensitivity: Sensitivity, branching: int, shares: np.ndarray
    ) -> None:
        super().__init__(layout, privacy)
        self.tree = Tree.with_branching(layout.size, branching)
        self.sensitivity = sensitivity
        total = privacy.epsilon if privacy.is_laplace else privacy.rho
        self.budgets = within(np.asarray(shares, dtype=float) * total, total)
        self.noises: dict[int, GroupNoise] = {
            level: noise_for_group(privacy, float(budget), sensitivity)
            for level, budget in enumerate(self.budgets)
            if budget > 0
        }
        self.branching = branching
        self.name = f"hierarchy(b={branching})"

    @cached_property
    def covariance(self) -> TreeCovariance:
        variances = np.full(self.tree.levels, math.inf)
        for level, group in self.noises.items():
            variances[level] = group.variance
        return TreeCovariance(self.tree, variances)

    def group_budgets(self) -> tuple[GroupBudget, ...]:
        cells = self.layout.other_cells
        return tuple(
            GroupBudget(level_name(level), cells * (self.tree.padded // self.tree.block_sizes[level]),
                        float(self.budgets[level]), group.variance)
            for level, group in self.noises.items()
        )

    def measure(self, marginals: Mapping[tuple[str, ...], np.ndarray], rng: object = None, noise: bool = True) -> Measurement:
        leaves = self.layout.leaves(marginals)
        padded = np.zeros((leaves.shape[0], self.tree.padded), dtype=np.int64)
        padded[:, : self.tree.size] = leaves
        sums = {level: self.tree.level_sums(padded, level) for level in self.noises}
        if noise:
            sizes = [s.size for s in sums.values()]
            parameters = np.repeat([self.noises[level].parameter for level in sums], sizes)
            drawn = np.split(sample_noise(self.privacy, parameters, rng), np.cumsum(sizes)[:-1])
            sums = {level: s + d.reshape(s.shape) for (level, s), d in zip(sums.items(), drawn)}
        return Measurement(
            self.name,
            {level_name(level): s for level, s in sums.items()},
            {level_name(level): np.full(s.shape, self.noises[level].variance) for level, s in sums.items()},
            self.privacy,
            {"fanouts": self.tree.fanouts},
        )

    def estimate(self, measurement: Measurement) -> np.ndarray:
        values = {level: np.asarray(measurement.values[level_name(level)], dtype=float) for level in self.noises}
        return self.covariance.estimate(values)[:, : self.tree.size]


def hierarchy_candidate(
    layout: RangeLayout, privacy: Privacy, contributions: int, branching: int
) -> HierarchyCandidate:
    tree = Tree.with_branching(layout.size, branching)
    masses = sum(
        p.weight**2 * layout.other_mass(p) * tree.block_masses(layout.ordered_block(p)) for p in layout.workload.products
    )
    shares = optimal_shares(tree, np.asarray(masses, dtype=float), privacy)
    return HierarchyCandidate(layout, privacy, Sensitivity(contributions), branching, shares)


def candidates(workload: Workload, privacy: Privacy, contributions: int = 1) -> list[Candidate]:
    """The best hierarchy (over ``BRANCHINGS``) for each ordered attribute carrying ranges."""
    found: list[Candidate] = []
    for layout in range_layouts(workload):
        trees = [
            hierarchy_candidate(layout, privacy, contributions, b)
            for b in BRANCHINGS
            if b == BRANCHINGS[0] or b < 2 * layout.size
        ]
        found.append(min(trees, key=lambda c: c.expected_error()))
    return found
