"""How a statement that must select its group keys splits its budget between selection and counting.

A GROUP BY over a column with no public domain first selects keys privately (``planner.partition``),
then counts the statement's cells over the released keys. The statement's budget (ε, or ρ under zCDP)
is split into a fraction ``f`` for selection and ``1 − f`` for counting. ``f`` is chosen on a grid
(:data:`SELECTION_FRACTIONS`), and against the thresholding primitive that releases its own noisy count
(``f = 1``; Laplace thresholding under pure DP, Gaussian under zCDP, only when the caller allows it), to
minimise the data-independent objective

    max over n ≥ 1 of  π_f(n) · V_f + (1 − π_f(n)) · n²,

the worst expected squared error of one key with ``n`` units (and ``n`` rows) over all ``n``: a kept key
errs by its count's noise variance ``V_f``, a dropped key by its whole count (it reads as 0). It
balances a late selection midpoint (large ``f`` needed) against noisy counts (small ``f`` needed). The
grid is searched with the split optimal primitive (closed form); at the best ``f``,
:func:`planner.partition.choose` may swap in Gaussian thresholding (``k > 1``, lower midpoint). For a
thresholding primitive whose noisy count is released, ``π(n)·V`` is the exact ``E[Z²; kept]``, which
includes the selection bias (keys are kept when their noise is high). Under zCDP a fraction ``f`` of ρ
buys selection at ``ε_sel = √(2fρ)`` (the ε of a pure mechanism costing ``fρ`` in zCDP).

Everything here depends on public inputs only (the budget, δ, the contribution bounds), so the split is
decided before any data is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from planner.noise import discrete_gaussian_variance, discrete_laplace_variance
from planner.partition import (
    PartitionSelection,
    choose,
    gaussian_threshold,
    laplace_threshold,
    optimal,
    require_selection_possible,
)
from planner.privacy import Privacy

SELECTION_FRACTIONS = tuple(round(0.05 * i, 2) for i in range(1, 20))  # 0.05, 0.10, …, 0.95
ALWAYS_KEPT_PROBABILITY = 1 - 1e-9  # where the objective's search over n stops for thresholding


@dataclass(frozen=True)
class SelectionSplit:
    """The primitive, the selection share and the counting privacy of one statement."""

    primitive: PartitionSelection
    fraction: float  # share of the statement's budget spent on selection (1 when the noisy count is reused)
    count_privacy: Privacy | None  # None when the primitive's noisy count is released
    count_variance: float  # noise variance of one released count (V in the objective)
    objective: float  # max_n π(n)·V + (1 − π(n))·n² of this split

    @property
    def reuses_noisy_count(self) -> bool:
        return self.count_privacy is None

    def describe(self) -> str:
        if self.reuses_noisy_count:
            counting = "the thresholded noisy unit count is released as the count (no separate counting)"
        else:
            counting = f"counts measured under {self.count_privacy}"
        return (
            f"{self.fraction:.0%} of the statement's budget to selection, {counting}; per-count noise variance "
            f"{self.count_variance:.4g}; worst expected squared error of one key (dropped keys count as 0) "
            f"{self.objective:.4g}, the least over the candidate splits"
        )


def worst_key_error(primitive: PartitionSelection, variance: float | None) -> float:
    """``max over n ≥ 1 of π(n)·V + (1 − π(n))·n²``: the objective the split minimises. With
    ``variance=None`` the primitive's own noisy count is released: ``π(n)·V`` is then the exact
    ``E[Z²; kept]`` of a thresholding primitive (its selection bias included)."""
    always = primitive.always_kept()
    limit = always if math.isfinite(always) else primitive.n_reaching(ALWAYS_KEPT_PROBABILITY)
    n = np.arange(1, max(1, math.ceil(limit)) + 1)
    keep = np.asarray(primitive.probability_of_keep(n), dtype=float)
    if variance is None:
        kept_error = np.asarray(primitive.kept_squared_error(n), dtype=float)  # type: ignore[attr-defined]
    else:
        kept_error = keep * variance
    return float(np.max(kept_error + (1 - keep) * n.astype(float) ** 2))


def count_variance(privacy: Privacy, contributions: int) -> float:
    """Noise variance of one count measured alone under ``privacy`` (the objective's ``V``)."""
    if privacy.is_laplace:
        return float(discrete_laplace_variance(contributions / privacy.epsilon))
    return float(discrete_gaussian_variance(contributions**2 / (2 * privacy.rho)))


@lru_cache(maxsize=128)
def split(privacy: Privacy, delta: float, max_groups: int, contributions: int, reuse_allowed: bool) -> SelectionSplit:
    """The split of ``privacy`` (the statement's ε or ρ) with the least :func:`worst_key_error`: selection
    at δ ``delta`` for units touching at most ``max_groups`` keys, counts of L1 sensitivity
    ``contributions``. Raises :class:`planner.partition.PartitionSelectionImpossibleError` when δ = 0."""
    require_selection_possible(delta)
    budget = privacy.epsilon if privacy.is_laplace else privacy.rho

    def selection_epsilon(fraction: float) -> float:
        return budget * fraction if privacy.is_laplace else math.sqrt(2 * fraction * budget)

    def measured(fraction: float, primitive: PartitionSelection) -> SelectionSplit:
        rest = budget * (1 - fraction)
        count_privacy = Privacy.laplace(rest) if privacy.is_laplace else Privacy.zcdp(rest)
        variance = count_variance(count_privacy, contributions)
        return SelectionSplit(primitive, fraction, count_privacy, variance, worst_key_error(primitive, variance))

    grid = [measured(f, optimal(selection_epsilon(f), delta, max_groups)) for f in SELECTION_FRACTIONS]
    best = min(grid, key=lambda candidate: candidate.objective).fraction
    candidates = [measured(best, choose(selection_epsilon(best), delta, max_groups))]
    if reuse_allowed:
        thresholding = (laplace_threshold if privacy.is_laplace else gaussian_threshold)(selection_epsilon(1.0), delta, max_groups)
        scale = float(thresholding.noise_scale)  # type: ignore[arg-type]
        variance = float(discrete_laplace_variance(scale) if privacy.is_laplace else discrete_gaussian_variance(scale**2))
        candidates.append(SelectionSplit(thresholding, 1.0, None, variance, worst_key_error(thresholding, None)))
    return min(candidates, key=lambda candidate: candidate.objective)
