"""p-Identity with ridge-pair noise: the same kind of strategy rows, better ε-DP noise (ranges, ε-DP).

Independent Laplace noise is not the best ε-DP noise for a strategy's rows. The noise only has to keep
its log-density 1/b-Lipschitz in the L1 norm (``planner.noise``); two rows can share a *ridge pair*, whose
density is flat along a short segment in the direction (1, −1). Its sum is then less noisy than two
independent Laplace samples (Var(Y₁+Y₂) → 2b² instead of 4b²) and its difference more. The noise on two
cell rows of an ordered attribute is mostly seen through range sums that contain both cells, so GLS gains:
on two cells the ridge pair *is* the optimum over all ε-DP noise densities (within 1e-4 of a linear
program over the lattice, ``benchmarks/noise_lp.py``), 4 % better than any matrix mechanism for the two
ranges and 8 % for the two prefixes. Privacy is unchanged: a neighbour moves the strategy answers by a vector of L1 norm at most
``kΔ``, and the log-density of every pair moves by at most the L1 norm of its part of that vector over b.

The strategy is p-Identity's ``A = [I; Θ]·diag(1/c)`` (``planner.strategies.pidentity``). Its cell rows
are paired (cells 0 and 1, 2 and 3, …) with ridge width ``w_I``, its other rows in the order the
optimiser keeps them with width ``w_Θ`` (w = 2h/b, the segment's length in units of the scale); an odd
row out keeps Laplace noise. With the noise covariances ``N(w_I)`` and ``M(w_Θ)`` the expected error is
``(2b²) tr(G̃ (N⁻¹ + ΘᵀM⁻¹Θ)⁻¹)`` (``pidentity.objective``), in O(n p) per evaluation. Planning starts
from p-Identity's hat start: widths by a bounded quasi-Newton search on the two numbers, ``Θ`` by
L-BFGS-B at those widths (as many iterations as p-Identity; a ``Θ`` of more than
``SUPPORT_ONLY_ENTRIES`` entries only over the entries under the start's hats: on 1,024 prefixes the
optimum puts 0.4 % of its mass elsewhere, and the smaller problem converges faster — 80 iterations reach a
lower error than 120 over all of ``Θ`` in 40 % of the time), the widths once more. Width 0 is Laplace
noise, so this family contains p-Identity and replaces it in the planner's search (p-Identity stays the
published baseline in ``benchmarks/ranges.py``). On all ranges and all prefixes of 1,024 cells the error
falls from p-Identity's 5.00 and 5.44 to about 4.45 and 4.76 times the SVD bound in the same planning time.

Released: the integer rows of ``pidentity.integer_strategy``, the integer half-width
``h = round(w b/2)`` for the discrete Laplace scale ``b`` really used, and exact ridge samples
(``noise.discrete_ridge_pairs``). A pair's sum and difference are uncorrelated with the exact variances
``s_h``, ``d_h`` (``noise.discrete_ridge_variances``), so GLS whitens each pair into the two rows
``(S_i + S_j)/√s_h`` and ``(S_i − S_j)/√d_h``; the covariance ``(WᵀW)⁻¹`` of the whitened rows W is exact
for what is released.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner import caches, noise
from planner.budget import Sensitivity
from planner.privacy import Privacy
from planner.strategies import pidentity
from planner.strategies.base import Candidate, GroupBudget, Measurement
from planner.strategies.ranges import RangeLayout
from planner.workload import Workload

MAX_WIDTH = 3.0  # widths searched in [0, MAX_WIDTH]: the optimum is 1.5–2.5; the sampler keeps ≥ 10 %
WIDTH_TOLERANCE = 1e-7  # relative change of the error at which the width search stops
LARGE_WIDTH_TOLERANCE = 1e-6  # ... for a Θ of more than SUPPORT_ONLY_ENTRIES entries (1e-7: 1.5–3× the evaluations)
FIRST_WIDTHS = (1.6, 1.6)  # where the width search starts (the optima seen are 1.3–2.5)
SUPPORT_ONLY_ENTRIES = 1 << 15  # a larger Θ is optimised on its start's support only (below, all of Θ: better)
SUPPORT_ITERATIONS = 80  # L-BFGS-B iterations on that support (n = 1024: ~0.4 s, less error than 120 on all of Θ)
GROUP = "p-identity rows in ridge pairs"


@dataclass(frozen=True)
class RidgeDesign:
    """``Θ`` and the two ridge widths (cell rows, other rows) that minimise the real-valued error."""

    theta: np.ndarray
    cell_width: float
    row_width: float

    def packed(self) -> np.ndarray:
        """One array (the memo stores arrays): the two widths, then ``Θ`` by rows."""
        return np.concatenate([[self.cell_width, self.row_width], self.theta.ravel()])

    @classmethod
    def unpacked(cls, array: np.ndarray, shape: tuple[int, int]) -> RidgeDesign:
        return cls(array[2:].reshape(shape), float(array[0]), float(array[1]))


def noise_structures(theta: np.ndarray, cell_width: float, row_width: float) -> tuple[pidentity.PairNoise, pidentity.PairNoise]:
    rows, size = theta.shape
    return pidentity.PairNoise.ridge(size, cell_width), pidentity.PairNoise.ridge(rows, row_width)


def best_widths(theta: np.ndarray, gram: pidentity.GramOperator, start: tuple[float, float]) -> tuple[float, float]:
    """The two widths minimising ``f(Θ)`` for fixed ``Θ`` (a smooth function of two bounded numbers)."""
    from scipy.optimize import minimize  # imported when first needed

    def error(widths: np.ndarray) -> float:
        return pidentity.objective_value(theta.ravel(), gram, *noise_structures(theta, *widths))

    tolerance = LARGE_WIDTH_TOLERANCE if theta.size > SUPPORT_ONLY_ENTRIES else WIDTH_TOLERANCE
    result = minimize(error, np.array(start), method="L-BFGS-B", bounds=[(0.0, MAX_WIDTH)] * 2, options={"ftol": tolerance})
    return float(result.x[0]), float(result.x[1])


def optimised_design(layout: RangeLayout, start: np.ndarray) -> RidgeDesign:
    """Widths at the hat start, ``Θ`` by L-BFGS-B at those widths (``Θ ≥ 0``, zero off the start's
    support), the widths again; memoized
    by the workload Gram and the start like ``pidentity.optimised_theta`` (nothing depends on ε)."""
    start = np.round(start, 12)
    gram = pidentity.GramOperator(layout)
    key = (gram.signature(), start.shape, start.tobytes())
    return RidgeDesign.unpacked(_DESIGN_CACHE.get(key, lambda: _designed(start, gram).packed()), start.shape)


def _designed(start: np.ndarray, gram: pidentity.GramOperator) -> RidgeDesign:
    from scipy.optimize import minimize

    widths = best_widths(start, gram, FIRST_WIDTHS)
    noises = noise_structures(start, *widths)
    large = start.size > SUPPORT_ONLY_ENTRIES
    support = np.flatnonzero(start.ravel() > 0) if large else np.arange(start.size)  # the variables
    full = np.zeros(start.size)

    def restricted(values: np.ndarray) -> tuple[float, np.ndarray]:
        full[support] = values
        value, gradient = pidentity.objective(full, gram, *noises)
        return value, gradient[support]

    result = minimize(
        restricted, start.ravel()[support], jac=True, method="L-BFGS-B",
        bounds=pidentity.nonnegative(support.size),
        options={"maxiter": SUPPORT_ITERATIONS if large else pidentity.MAX_ITERATIONS},
    )
    full[support] = np.maximum(result.x, 0.0)
    theta = full.reshape(start.shape)
    return RidgeDesign(theta, *best_widths(theta, gram, widths))


_DESIGN_CACHE = caches.ArrayMemo(size=16)


@dataclass(frozen=True, eq=False)
class RidgePairs:
    """Which integer strategy rows share a ridge pair, the half-widths and the exact noise variances."""

    first: np.ndarray  # first row of each pair
    second: np.ndarray  # its partner
    half_widths: np.ndarray  # per pair
    sum_variances: np.ndarray  # Var(Y₁+Y₂) per pair
    difference_variances: np.ndarray  # Var(Y₁−Y₂) per pair
    single: np.ndarray  # rows with discrete Laplace noise
    single_variance: float

    @classmethod
    def for_strategy(cls, rows: int, cells: int, scale: float, cell_width: float, row_width: float) -> RidgePairs:
        """Cell rows ``0..cells-1`` paired in order, the rows after them likewise; an odd one out is single."""
        groups = [(np.arange(0, cells - 1, 2), cell_width), (np.arange(cells, rows - 1, 2), row_width)]
        first = np.concatenate([g for g, _ in groups])
        half = np.concatenate([np.full(g.size, noise.ridge_half_width(scale, w), dtype=np.int64) for g, w in groups])
        single = np.setdiff1d(np.arange(rows), np.concatenate([first, first + 1]))
        variances = {int(h): noise.discrete_ridge_variances(scale, int(h)) for h in np.unique(half)}
        return cls(
            first, first + 1, half,
            np.array([variances[int(h)][0] for h in half]), np.array([variances[int(h)][1] for h in half]),
            single, float(noise.discrete_laplace_variance(scale)),
        )

    def whiten(self, matrix: np.ndarray) -> np.ndarray:
        """Rows of ``matrix`` (one per strategy row) mapped to unit-variance, uncorrelated rows."""
        first, second = matrix[self.first].astype(float), matrix[self.second].astype(float)
        shape = (-1,) + (1,) * (matrix.ndim - 1)
        return np.concatenate([
            (first + second) / np.sqrt(self.sum_variances).reshape(shape),
            (first - second) / np.sqrt(self.difference_variances).reshape(shape),
            matrix[self.single].astype(float) / np.sqrt(self.single_variance),
        ])

    def row_variances(self, rows: int) -> np.ndarray:
        """Each strategy row's own noise variance ((s + d)/4 in a pair)."""
        variances = np.full(rows, self.single_variance)
        variances[self.first] = variances[self.second] = (self.sum_variances + self.difference_variances) / 4.0
        return variances

    def sample(self, count: int, rows: int, scale: float, rng: noise.RandomLike) -> np.ndarray:
        """Noise for ``count`` independent copies of the strategy (shape ``(count, rows)``)."""
        source = noise.as_source(rng)  # one stream for every draw below
        values = np.zeros((count, rows), dtype=np.int64)
        for h in np.unique(self.half_widths):
            chosen = self.half_widths == h
            pairs = noise.discrete_ridge_pairs(scale, int(h), count * int(chosen.sum()), source).reshape(count, -1, 2)
            values[:, self.first[chosen]], values[:, self.second[chosen]] = pairs[..., 0], pairs[..., 1]
        if self.single.size:
            values[:, self.single] = noise.discrete_laplace(scale, size=(count, self.single.size), rng=source)
        return values


class RidgeCandidate(pidentity.PIdentityCandidate):
    """p-Identity's integer rows with ridge-pair noise and the matching (whitened) dense GLS."""

    def __init__(self, layout: RangeLayout, privacy: Privacy, sensitivity: Sensitivity, design: RidgeDesign) -> None:
        super().__init__(layout, privacy, sensitivity, pidentity.integer_strategy(design.theta))
        self.design = design
        self.pairs = RidgePairs.for_strategy(
            self.rows.shape[0], layout.size, self.noise.parameter, design.cell_width, design.row_width
        )
        self.name = f"p-identity+ridge(p={self.rows.shape[0] - layout.size})"

    @cached_property
    def covariance(self) -> pidentity.StrategyCovariance:
        return pidentity.StrategyCovariance(self.pairs.whiten(self.rows), 1.0)

    def group_budgets(self) -> tuple[GroupBudget, ...]:
        rows = self.layout.other_cells * self.rows.shape[0]
        variance = float(self.pairs.row_variances(self.rows.shape[0]).max())  # the largest per-row variance
        return (GroupBudget(GROUP, rows, self.privacy.epsilon, variance),)

    def measure(self, marginals: Mapping[tuple[str, ...], np.ndarray], rng: object = None, noise: bool = True) -> Measurement:
        values = self.layout.leaves(marginals) @ self.rows.T  # exact integers (other cells, rows)
        if noise:
            values = values + self.pairs.sample(values.shape[0], values.shape[1], self.noise.parameter, rng)
        variances = np.broadcast_to(self.pairs.row_variances(values.shape[1]), values.shape)
        metadata = {"ridge half-widths": sorted({int(h) for h in self.pairs.half_widths})}
        return Measurement(self.name, {GROUP: values}, {GROUP: variances}, self.privacy, metadata)

    def estimate(self, measurement: Measurement) -> np.ndarray:
        whitened = self.pairs.whiten(np.asarray(measurement.values[GROUP]).T)  # (whitened rows, other cells)
        return (whitened.T @ self.covariance.rows) @ self.covariance.matrix()


def candidates(workload: Workload, privacy: Privacy, contributions: int = 1) -> list[Candidate]:
    """A ridge-noise p-Identity strategy wherever p-Identity applies (``pidentity.hat_starts``)."""
    return [
        RidgeCandidate(layout, privacy, Sensitivity(contributions), optimised_design(layout, start))
        for layout, start in pidentity.hat_starts(workload, privacy, contributions)
    ]
