"""Choosing the truncation privately: Race-to-the-Top (R2T).

A query over a join along foreign keys (visits of persons, prescriptions of visits) lets one privacy unit
contribute any number of rows. Truncating each unit to ``τ`` rows gives a query ``Q(D, τ)`` of sensitivity
``τ·w`` (``w``: the most one row adds, 1 for a count) that never exceeds ``Q(D)``, grows with ``τ``, and
equals ``Q(D)`` once ``τ`` reaches the largest contribution ``τ*(D)``. A small ``τ`` loses the rows above
it (bias), a large one adds noise in proportion; the best ``τ`` depends on the data. Dong, Fang, Yi, Tao
and Machanavajjhala ("R2T: Instance-optimal Truncation for Differentially Private Query Evaluation with
Foreign Keys", SIGMOD 2022) evaluate the query at every level ``τ_j = 2^j`` (``j = 0 … L``, ``n = L + 1``
levels, ``2^L`` at least any contribution the data may hold), and release

    Q̃(D) = max( max_j Q(D, τ_j) + Z_j − s_j ,  Q(D, 0) )

where ``Z_j`` is noise for sensitivity ``τ_j·w`` at a ``1/n`` share of the budget and ``s_j`` shifts level
``j`` below its answer by the noise's ``1 − β/(2n)`` quantile.

**Privacy.** Each level is one noisy answer of an ``(ε/n)``-DP (``ρ/n``-zCDP) mechanism: discrete Laplace
of scale ``b_j = n·τ_j·w/ε`` (discrete Gaussian of ``σ_j² = n·(τ_j·w)²/(2ρ)``) on an integer query of
sensitivity ``τ_j·w``. ``Q(D, 0)`` (no rows kept) does not depend on the data; shifts and the maximum
are post-processing. The ``n`` levels compose to ``ε`` (``ρ``). The same holds per cell for a vector of
cells (a GROUP BY): a unit's ``τ_j`` kept rows move the cells' answers by at most ``τ_j·w`` in L1 (and
so in L2) together, and every cell gets its own draw at the level's scale.

**Error.** ``s_j`` is chosen so that ``P(Z_j > s_j) ≤ β/(2n)`` (and, by symmetry, ``P(Z_j < −s_j)``): the
discrete Laplace tail ``P(Z ≥ m) = q^m/(1 + q)``, ``q = e^{−1/b}``, gives
``s_j = b_j·ln(2n/(β(1 + q_j)))`` (the paper's ``b_j ln(n/β)`` as ``b_j`` grows); the discrete Gaussian is
sub-Gaussian with parameter ``σ²`` (Canonne, Kamath and Steinke 2020), so ``s_j = σ_j·sqrt(2 ln(2n/β))``.
Then, per cell, with probability at least ``1 − β``: no level exceeds its answer, so ``Q̃ ≤ Q(D)``; and
the first level ``j*`` with ``τ_j* ≥ τ*(D)`` answers ``Q(D)`` exactly and lands at least ``Q(D) − 2 s_j*``,
so ``Q(D) − 2 s_j* ≤ Q̃ ≤ Q(D)`` (:meth:`RaceToTheTop.error_bound`; ``2 s_j* ≤ 4 n ln(2n/β) τ*(D)·w/ε``,
the paper's Theorem 5.1: within a log factor of the best truncation, without knowing ``τ*`` in advance).
:meth:`RaceToTheTop.expected_error` gives the exact mean absolute error for given per-level answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.noise import RandomLike, discrete_gaussian, discrete_laplace, gaussian_sigma2_used, laplace_scale_used
from planner.privacy import Privacy

MAX_LEVELS = 63  # τ = 2^62 at most: answers stay int64


@dataclass(frozen=True)
class TruncatedRelease:
    """What :meth:`RaceToTheTop.release` returns, per cell: the released value and the level that gave it.

    ``levels[i]`` is the truncation ``τ_j`` whose noisy, shifted answer was the largest for cell ``i``, or 0
    when the floor ``Q(D, 0)`` was (post-processing of the released noisy answers: free to use, e.g. as the
    truncation of a later measurement)."""

    values: np.ndarray  # float, one per cell
    levels: np.ndarray  # int64, one per cell: the winning τ_j, or 0 for the floor


@dataclass(frozen=True)
class RaceToTheTop:
    """R2T over ``truncations`` ``τ_j`` (module doc): noise, shifts, release, error bound and exact mean error.

    >>> r2t = RaceToTheTop.design(Privacy.laplace(1.0), largest=8)
    >>> r2t.truncations, [round(b, 2) for b in r2t.noise_parameters]
    ((1, 2, 4, 8), [4.0, 8.0, 16.0, 32.0])
    """

    privacy: Privacy  # what the whole release spends (every level and every cell together)
    truncations: tuple[int, ...]  # τ_j = 2^j, j = 0 … L
    row_weight: int = 1  # w: the most one kept row adds to an answer (integer units)
    beta: float = 0.1  # per cell, P(the error bound fails) ≤ β
    floor: float = 0.0  # Q(D, 0): the answer with no rows kept (0 for counts and non-negative sums)

    def __post_init__(self) -> None:
        levels = self.truncations
        if not 1 <= len(levels) <= MAX_LEVELS or any(t != 1 << j for j, t in enumerate(levels)):
            raise ValueError(f"truncations must be 1, 2, 4, … (at most 2^{MAX_LEVELS - 1}), got {levels!r}")
        if isinstance(self.row_weight, bool) or not isinstance(self.row_weight, int) or self.row_weight < 1:
            raise ValueError(f"row_weight must be a positive integer, got {self.row_weight!r}")
        if not 0 < self.beta < 1:
            raise ValueError(f"beta must lie in (0, 1), got {self.beta!r}")
        if not math.isfinite(self.floor):
            raise ValueError(f"floor must be a finite number, got {self.floor!r}")

    @classmethod
    def design(cls, privacy: Privacy, largest: int, row_weight: int = 1, beta: float = 0.1, floor: float = 0.0) -> RaceToTheTop:
        """Levels ``1, 2, 4, …`` up to the first power of two at least ``largest`` (the most rows one unit
        can have after the join, or a public cap on it)."""
        if isinstance(largest, bool) or not isinstance(largest, int) or largest < 1:
            raise ValueError(f"largest must be a positive integer, got {largest!r}")
        count = max(1, (largest - 1).bit_length() + 1)
        if count > MAX_LEVELS:
            raise ValueError(f"largest must be at most 2^{MAX_LEVELS - 1}, got {largest}")
        return cls(privacy, tuple(1 << j for j in range(count)), row_weight, beta, floor)

    # -- the levels' noise -------------------------------------------------------------------------------
    @property
    def level_count(self) -> int:
        return len(self.truncations)

    @property
    def level_privacy(self) -> Privacy:
        """What one level spends: a ``1/n`` share of the budget."""
        return self.privacy.scaled(1 / self.level_count)

    @property
    def sensitivities(self) -> np.ndarray:
        """``τ_j·w`` per level: what one unit's kept rows move the level's answer (L1 over the cells) by."""
        return np.array(self.truncations, dtype=np.float64) * self.row_weight

    @property
    def noise_parameters(self) -> np.ndarray:
        """Per level, the discrete Laplace scale ``b_j`` (ε-DP) or the discrete Gaussian ``σ_j²`` (zCDP), as sampled."""
        share = self.level_privacy
        if share.is_laplace:
            return np.asarray(laplace_scale_used(self.sensitivities / float(share.epsilon)), dtype=np.float64)
        return np.asarray(gaussian_sigma2_used(self.sensitivities**2 / (2 * float(share.rho))), dtype=np.float64)

    @property
    def shifts(self) -> np.ndarray:
        """``s_j``: each level's noise exceeds it with probability at most ``β/(2n)`` (module doc)."""
        tail = self.beta / (2 * self.level_count)
        parameters = self.noise_parameters
        if self.privacy.is_laplace:
            q = np.exp(-1.0 / parameters)
            return parameters * np.log(1.0 / (tail * (1.0 + q)))
        return np.sqrt(parameters) * math.sqrt(2 * math.log(1.0 / tail))

    # -- release -----------------------------------------------------------------------------------------
    def release(self, answers: np.ndarray, rng: RandomLike = None, noise: bool = True) -> TruncatedRelease:
        """The released values of ``answers`` (integers ``Q(D, τ_j)``, shape ``(levels,)`` or ``(levels, cells)``).

        ``noise=False`` (tests only, behind ``dpsql.testing``) releases the shifted answers without noise.
        ``rng`` (a seed, generator or :class:`planner.noise.RandomSource`) is for tests; by default the noise
        comes from the OS CSPRNG."""
        table = self._checked(answers)
        shifted = self._noisy(table, rng, noise)
        best = np.argmax(shifted, axis=0)
        top = shifted[best, np.arange(table.shape[1])]
        floor_wins = top < self.floor
        values = np.where(floor_wins, self.floor, top)
        levels = np.where(floor_wins, 0, np.asarray(self.truncations, dtype=np.int64)[best])
        return TruncatedRelease(values, levels)

    def choose(self, answers: np.ndarray, penalty: float, rng: RandomLike = None, noise: bool = True) -> int:
        """A truncation for a later measurement: the level maximising its noisy, shifted answer minus ``penalty·τ_j``
        (``answers``: one cell's per-level integers). ``penalty`` is what each unit of truncation costs the later
        measurement in noise, in the answers' units — public, so the choice is post-processing of the same noisy
        levels as :meth:`release` and spends what it does. Shifting makes the choice conservative: a level is not
        chosen for noise that happened to lift it."""
        if not math.isfinite(penalty) or penalty < 0:
            raise ValueError(f"penalty must be a finite number at least 0, got {penalty!r}")
        table = self._checked(answers)
        if table.shape[1] != 1:
            raise ValueError(f"choose takes one cell's answers, got {table.shape[1]} cells")
        scores = self._noisy(table, rng, noise)[:, 0] - penalty * np.asarray(self.truncations, dtype=np.float64)
        return int(self.truncations[int(np.argmax(scores))])

    def _checked(self, answers: np.ndarray) -> np.ndarray:
        table = np.asarray(answers)
        if table.ndim == 1:
            table = table[:, None]
        if table.ndim != 2 or table.shape[0] != self.level_count or table.shape[1] < 1:
            raise ValueError(f"answers must have one row per level ({self.level_count}) and at least one cell, got shape {np.shape(answers)}")
        if not np.issubdtype(table.dtype, np.integer):
            raise ValueError(f"answers must be integers (counts, or sums in units of the row weight's scale), got {table.dtype}")
        return table

    def _noisy(self, table: np.ndarray, rng: RandomLike, noise: bool) -> np.ndarray:
        """Every level's answers plus its noise, minus its shift (the mechanism: module doc)."""
        parameters = np.repeat(self.noise_parameters[:, None], table.shape[1], axis=1)
        if not noise:
            draws = np.zeros(table.shape, dtype=np.int64)
        elif self.privacy.is_laplace:
            draws = discrete_laplace(parameters, rng=rng)
        else:
            draws = discrete_gaussian(parameters, rng=rng)
        return table.astype(np.float64) + draws - self.shifts[:, None]

    # -- error ---------------------------------------------------------------------------------------------
    def error_bound(self, largest_contribution: int) -> float:
        """With probability at least ``1 − β`` per cell, ``Q(D) − bound ≤ Q̃ ≤ Q(D)`` when no unit contributes more
        than ``largest_contribution`` rows (``τ*(D)``): ``2 s_j*`` for the first level ``τ_j* ≥ τ*(D)``. A
        ``largest_contribution`` beyond the last level has no bound (``inf``)."""
        if largest_contribution <= 0:
            return float(2 * self.shifts[0])
        for truncation, shift in zip(self.truncations, self.shifts):
            if truncation >= largest_contribution:
                return float(2 * shift)
        return math.inf

    def expected_error(self, answers: np.ndarray, truth: float) -> float:
        """The exact mean absolute error ``E|Q̃ − truth|`` of one cell whose per-level answers are ``answers``.

        ``P(Q̃ ≤ x) = [floor ≤ x] · Π_j P(Z_j ≤ ⌊x − a_j + s_j⌋)`` is a step function: ``E|Q̃ − t|`` is
        ``∫_{−∞}^{t} F + ∫_{t}^{∞} (1 − F)``, summed exactly between its steps over the window where the
        levels' laws hold all but 10⁻¹⁵ of their mass (a Laplace scale beyond 10⁵ is integrated on a grid of
        10⁶ points instead: relative error below 10⁻⁵)."""
        levels = np.asarray(answers, dtype=np.float64).reshape(-1)
        if levels.size != self.level_count:
            raise ValueError(f"answers must hold one value per level ({self.level_count}), got {levels.size}")
        offsets = levels - self.shifts
        parameters = self.noise_parameters
        spreads = parameters * math.log(1e15) if self.privacy.is_laplace else np.sqrt(parameters) * math.sqrt(2 * math.log(1e15))
        low = min(float(np.min(offsets - spreads)), self.floor, truth)
        high = max(float(np.max(offsets + spreads)), self.floor, truth)
        steps = [np.array([self.floor, truth, low, high])]
        exact = float(np.sum(2 * spreads + 1)) <= 2e6
        if exact:
            for offset, spread in zip(offsets, spreads):
                steps.append(offset + np.arange(math.floor(-spread) - 1, math.ceil(spread) + 2))
        else:
            steps.append(np.linspace(low, high, 1_000_001))
        points = np.unique(np.clip(np.concatenate(steps), low, high))
        middles = (points[:-1] + points[1:]) / 2
        cdf = np.where(middles >= self.floor, 1.0, 0.0)
        for offset, parameter in zip(offsets, parameters):
            cdf = cdf * self._draw_cdf(np.floor(middles - offset), float(parameter))
        widths = np.diff(points)
        below = middles < truth
        return float(np.sum(widths[below] * cdf[below]) + np.sum(widths[~below] * (1.0 - cdf[~below])))

    def _draw_cdf(self, values: np.ndarray, parameter: float) -> np.ndarray:
        """``P(Z ≤ k)`` for integers ``k`` under one level's noise law."""
        if self.privacy.is_laplace:
            q = math.exp(-1.0 / parameter)
            with np.errstate(over="ignore"):
                return np.where(values >= 0, 1.0 - q ** (values + 1) / (1 + q), q ** np.abs(values) / (1 + q))
        half = math.ceil(12 * math.sqrt(parameter)) + 2
        support = np.arange(-half, half + 1)
        law = np.exp(-(support.astype(np.float64) ** 2) / (2 * parameter))
        cumulative = np.cumsum(law / law.sum())
        index = np.clip(values + half, -1, 2 * half).astype(np.int64)
        return np.where(index < 0, 0.0, cumulative[np.maximum(index, 0)])

    def describe(self) -> str:
        family = "discrete Laplace scales" if self.privacy.is_laplace else "discrete Gaussian variances"
        return (
            f"R2T over truncations {self.truncations[0]}…{self.truncations[-1]} ({self.level_count} levels at {self.level_privacy} each): "
            f"{family} {', '.join(f'{p:.4g}' for p in self.noise_parameters)}, shifted down by "
            f"{', '.join(f'{s:.4g}' for s in self.shifts)}; the largest shifted answer is released (β = {self.beta:g})"
        )
