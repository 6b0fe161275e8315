"""Choosing a contribution bound from a noisy histogram of how many rows the units have.

A measurement whose rows are truncated to ``τ`` per unit pays two errors: the rows of units beyond ``τ`` are lost
(bias), and its noise grows with ``τ`` (``penalty·τ`` in all, the penalty known from the plan, public). With the
units' row counts ``c_u`` one would choose ``τ`` minimising ``Σ_u max(0, c_u − τ) + penalty·τ``. Here the candidates
are the levels ``τ_0 = 1 < τ_1 < … < τ_L`` (:func:`bound_levels`: a geometric grid of ratio about √2, the powers of
two and the integers nearest ``2^i·√2`` between them, the last one the largest bound itself) and what is measured is
the histogram ``U_i`` of units by the level of their last row — ``i = 0`` for one row, ``i`` for
``τ_(i−1) < c_u ≤ τ_i`` (the last level also holds every unit beyond ``τ_(L−1)``). One unit is in one bucket, however
many buckets there are, so the histogram has L1 sensitivity 1 (``fan_out`` when each unit's first row may appear that
many times in what is counted): discrete Laplace noise of scale ``fan_out/ε`` (discrete Gaussian of
``σ² = fan_out²/(2ρ)``) makes it ε-DP (ρ-zCDP), and the choice is post-processing. The rows lost at ``τ_j`` are
estimated as ``Σ_{i>j} max(0, Ũ_i)·(m_i − τ_j)`` with ``m_i = (τ_(i−1) + τ_i)/2``, the middle of bucket ``i``. A grid
of ratio √2 rather than 2 puts a level within 1.42× of any unit's row count, so the bound chosen for data whose
heaviest units have 300 rows is 362, not 512 (the measurement's noise grows with the bound).

This costs far less than choosing from the truncated answers themselves (R2T's levels,
:class:`planner.RaceToTheTop`), whose level ``j`` has sensitivity ``τ_j`` and a ``1/(L+1)`` share of the budget:
the histogram's noise does not grow with the level. The idea of choosing the bound from a private estimate of the
contributions' distribution, against the bias and noise it causes, is that of Amin, Kulesza, Muñoz Medina and
Vassilvitskii ("Bounding User Contributions: A Bias-Variance Trade-off in Differential Privacy", ICML 2019).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.noise import RandomLike, discrete_gaussian, discrete_laplace, gaussian_sigma2_used, laplace_scale_used
from planner.privacy import Privacy


def bound_levels(largest: int) -> tuple[int, ...]:
    """The bounds a statement chooses among, up to ``largest``: 1, 2, 3, 4, 6, 8, 11, 16, 23, 32, … (the powers of
    two and the integers nearest ``2^i·√2`` between them), those below ``largest``, then ``largest`` itself.

    >>> bound_levels(300)
    (1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256, 300)
    >>> bound_levels(1)
    (1,)
    """
    if isinstance(largest, bool) or not isinstance(largest, int) or largest < 1:
        raise ValueError(f"largest must be a positive integer, got {largest!r}")
    grid = [1]
    power = 2
    while power < largest:
        grid.append(power)
        grid.append(round(power * math.sqrt(2)))
        power *= 2
    return (*(level for level in grid if level < largest), largest)


@dataclass(frozen=True)
class BoundChoice:
    """Choose ``τ`` among ``truncations`` from the units' level histogram (module doc).

    >>> choice = BoundChoice(Privacy.laplace(0.2), (1, 2, 4, 8), penalty=30.0)
    >>> choice.choose(np.array([500, 300, 100, 40]), noise=False)   # 40 units with 5–8 rows: worth τ = 4 here
    4
    """

    privacy: Privacy  # what the histogram spends
    truncations: tuple[int, ...]  # τ_0 = 1 < τ_1 < … < τ_L (bound_levels)
    penalty: float  # what each unit of τ costs the later measurement, in rows
    fan_out: int = 1  # how often one unit's first row may be counted in the histogram

    def __post_init__(self) -> None:
        levels = self.truncations
        if not levels or levels[0] != 1 or any(isinstance(t, bool) or not isinstance(t, int) for t in levels) or any(b <= a for a, b in zip(levels, levels[1:])):
            raise ValueError(f"truncations must be increasing integers from 1, got {levels!r}")
        if not math.isfinite(self.penalty) or self.penalty < 0:
            raise ValueError(f"penalty must be a finite number at least 0, got {self.penalty!r}")
        if isinstance(self.fan_out, bool) or not isinstance(self.fan_out, int) or self.fan_out < 1:
            raise ValueError(f"fan_out must be a positive integer, got {self.fan_out!r}")

    @property
    def noise_parameter(self) -> float:
        """The discrete Laplace scale (ε-DP) or discrete Gaussian σ² (zCDP) of every bucket, as sampled."""
        if self.privacy.is_laplace:
            return float(laplace_scale_used(self.fan_out / float(self.privacy.epsilon)))
        return float(gaussian_sigma2_used(self.fan_out**2 / (2 * float(self.privacy.rho))))

    def lost_rows(self, histogram: np.ndarray) -> np.ndarray:
        """The rows each ``τ_j`` would lose, estimated from a histogram of units by level (module doc)."""
        units = np.maximum(np.asarray(histogram, dtype=np.float64), 0.0)
        levels = np.asarray(self.truncations, dtype=np.float64)
        middles = np.concatenate([[1.0], (levels[:-1] + levels[1:]) / 2])
        return np.array([float(np.sum(units[j + 1:] * np.maximum(middles[j + 1:] - t, 0.0))) for j, t in enumerate(self.truncations)])

    def choose(self, histogram: np.ndarray, rng: RandomLike = None, noise: bool = True) -> int:
        """``τ_j`` minimising the estimated rows lost plus ``penalty·τ_j``, from the noisy ``histogram`` (integers, one per
        level). ``noise=False`` is for tests only (behind ``dpsql.testing``); ``rng`` too."""
        counts = np.asarray(histogram)
        if counts.shape != (len(self.truncations),) or not np.issubdtype(counts.dtype, np.integer):
            raise ValueError(f"histogram must hold one integer per level ({len(self.truncations)}), got {counts.shape} of {counts.dtype}")
        if noise:
            draw = discrete_laplace if self.privacy.is_laplace else discrete_gaussian
            counts = counts + draw(np.full(counts.shape, self.noise_parameter), rng=rng)
        scores = self.lost_rows(counts) + self.penalty * np.asarray(self.truncations, dtype=np.float64)
        return int(self.truncations[int(np.argmin(scores))])
