"""Choosing a contribution bound from a noisy histogram of how many rows the units have.

A measurement whose rows are truncated to ``τ`` per unit pays two errors: the rows of units beyond ``τ`` are lost
(bias), and its noise grows with ``τ`` (``penalty·τ`` in all, the penalty known from the plan, public). With the
units' row counts ``c_u`` one would choose ``τ`` minimising ``Σ_u max(0, c_u − τ) + penalty·τ``. Here the candidates
are ``τ_j = 2^j`` (``j = 0 … L``) and what is measured is the histogram ``U_i`` of units by the level of their last
row — ``i = 0`` for one row, ``i`` for ``2^(i−1) < c_u ≤ 2^i`` (the last level also holds every unit beyond
``2^(L−1)``). One unit is in one bucket, so the histogram has L1 sensitivity 1 (``fan_out`` when each unit's first
row may appear that many times in what is counted): discrete Laplace noise of scale ``fan_out/ε`` (discrete Gaussian
of ``σ² = fan_out²/(2ρ)``) makes it ε-DP (ρ-zCDP), and the choice is post-processing. The rows lost at ``τ_j`` are
estimated as ``Σ_{i>j} max(0, Ũ_i)·(m_i − τ_j)`` with ``m_i = 0.75·2^i``, the middle of bucket ``i``.

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


@dataclass(frozen=True)
class BoundChoice:
    """Choose ``τ`` among ``truncations`` from the units' level histogram (module doc).

    >>> choice = BoundChoice(Privacy.laplace(0.2), (1, 2, 4, 8), penalty=30.0)
    >>> choice.choose(np.array([500, 300, 100, 40]), noise=False)   # 40 units with 5–8 rows: worth τ = 4 here
    4
    """

    privacy: Privacy  # what the histogram spends
    truncations: tuple[int, ...]  # 1, 2, 4, …, 2^L
    penalty: float  # what each unit of τ costs the later measurement, in rows
    fan_out: int = 1  # how often one unit's first row may be counted in the histogram

    def __post_init__(self) -> None:
        if not self.truncations or any(t != 1 << j for j, t in enumerate(self.truncations)):
            raise ValueError(f"truncations must be 1, 2, 4, …, got {self.truncations!r}")
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
        middles = np.array([1.0] + [0.75 * (1 << i) for i in range(1, len(self.truncations))])
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
