"""Partition selection: which GROUP BY keys with no public domain may appear in a release
(docs/math.md §6, Desfontaines 2020).

Every primitive keeps a partition holding ``n`` distinct privacy units with probability
``π(n)``, ``π(0) = 0``, independently across partitions. Three primitives:

* :func:`optimal` — the optimal (ε, δ) primitive of Desfontaines 2020, computed exactly on a grid of
  multiples of 2^-62 (see :class:`OptimalSelection`; the real-valued recurrence, in 60-digit decimal
  arithmetic, is :func:`optimal_keep_probabilities_by_recurrence`). It dominates every (ε, δ)-DP
  primitive, up to the grid.
* :func:`laplace_threshold` — keep when ``n + Z ≥ T`` with ``Z`` discrete Laplace.
* :func:`gaussian_threshold` — keep when ``n + Z ≥ T`` with ``Z`` discrete Gaussian.

The two thresholding primitives use integer noise, so their noisy count may be released as the
partition's count (no floating-point noise ever leaves the engine). Because ``n + Z`` is an
integer, a fixed threshold would waste part of δ; instead a key with ``n + Z = T − 1`` is kept with
probability ``q`` chosen so the tail at ``n = 1`` spends exactly its share of δ.

A unit may touch up to ``k = max_groups`` partitions. The optimal primitive is then run with
``(ε/k, δ/k)`` per partition; Laplace thresholding uses scale ``k/ε`` and a per-partition tail ``p``
with ``1 − (1 − p)^k = δ``; Gaussian thresholding uses L2 sensitivity ``√k`` (see
:class:`GaussianThresholding` for the exact δ accounting). :func:`choose` picks the primitive
with the lowest midpoint.

>>> primitive = optimal(epsilon=1.0, delta=1e-5)
>>> round(primitive.midpoint(), 2), primitive.always_kept()
(11.37, 23)
"""

from __future__ import annotations

import decimal
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from planner.convolution import fft_convolve
from planner.noise import (
    RandomLike,
    RandomSource,
    as_source,
    discrete_gaussian,
    discrete_laplace,
    gaussian_sigma2_used,
    laplace_scale_used,
)

# Probabilities below this are treated as zero when truncating a noise distribution's support.
_NEGLIGIBLE_MASS = 1e-60

KEEP_PROBABILITY_BITS = 62
"""The optimal primitive's keep probabilities are multiples of 2^-62, sampled exactly: a key is kept
when a uniform integer on [0, 2^62) falls below the probability's numerator."""
MIN_PARTITION_DELTA = 1e-15
"""Smallest δ per partition (δ / max_groups) any primitive accepts: below it the optimal primitive's
first step δ is no longer resolved by the grid of :data:`KEEP_PROBABILITY_BITS` (and the
thresholding primitives' tail computations overflow near the smallest doubles)."""
EXACT_STEPS = 1 << 16
"""The optimal primitive's recurrence is computed exactly for this many units at most; beyond, its
keep probability grows by δ per unit (still (ε, δ)-DP; it only matters when ε per partition is below
about 2·ln(1/δ) / 65,536, where the midpoint is tens of thousands of units anyway)."""
_GRID = 1 << KEEP_PROBABILITY_BITS
_GROWTH_BITS = 128  # e^ε is bounded below by a multiple of 2^-128
_GROWTH_MARGIN = 2.0**-48  # relative error allowed to libm's expm1 (a few ulp in practice)
_GROWTH_EPSILON_CAP = 40.0  # e^40 ≫ 2^62: a larger ε changes no grid probability


class PartitionSelectionImpossibleError(ValueError):
    """Raised when no key can ever be released: pure ε-DP (δ = 0) admits no partition selection."""


def require_selection_possible(delta: float) -> None:
    """Raise :class:`PartitionSelectionImpossibleError` when δ = 0 makes selection impossible."""
    if delta == 0:
        raise PartitionSelectionImpossibleError(
            "partition selection is impossible with delta = 0: under pure epsilon-DP every key with no "
            "public domain must be suppressed. Set delta > 0 (for example 1e-6), or declare the "
            "column's domain (its list of possible values) in the schema."
        )


def _validate(epsilon: float, delta: float, max_groups: int) -> None:
    for name, value in (("epsilon", epsilon), ("delta", delta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    if isinstance(max_groups, bool) or not isinstance(max_groups, (int, np.integer)) or max_groups < 1:
        raise ValueError(f"max_groups (partitions one unit may touch) must be an integer >= 1, got {max_groups!r}")
    if 0 < delta / max_groups < MIN_PARTITION_DELTA:
        raise ValueError(
            f"delta per partition (delta / max_groups = {delta / max_groups:.3g}) must be 0 or at least "
            f"{MIN_PARTITION_DELTA:g}: use a larger delta for partition selection"
        )


def _counts_array(n: ArrayLike) -> np.ndarray:
    counts = np.asarray(n)
    if counts.dtype.kind not in "iu" and not (
        counts.dtype.kind == "f" and np.all(np.isfinite(counts)) and np.all(counts == np.round(counts))
    ):
        raise ValueError(f"unit counts must be non-negative integers, got {n!r}")
    counts = counts.astype(np.int64)
    if np.any(counts < 0):
        raise ValueError(f"unit counts must be non-negative integers, got {n!r}")
    return counts


def _real_n_reaching(probability_of_keep: Callable[[np.ndarray], np.ndarray], target: float, limit: int) -> float:
    """Real-valued ``n`` where a non-decreasing ``π`` first reaches ``target``, by linear
    interpolation between consecutive integers; ``limit`` must satisfy ``π(limit) >= target``."""
    if target <= 0:
        return 0.0
    low, high = 0, limit  # invariant: π(low) < target <= π(high)
    while high - low > 1:
        middle = (low + high) // 2
        if probability_of_keep(np.array(middle)) >= target:
            high = middle
        else:
            low = middle
    below, above = float(probability_of_keep(np.array(low))), float(probability_of_keep(np.array(high)))
    return low + (target - below) / (above - below)


class PartitionSelection(ABC):
    """A partition selection primitive: ``π(n)``, its midpoint, and a vectorized sampler."""

    name: ClassVar[str]
    reuses_noisy_count: ClassVar[bool]
    epsilon: float
    delta: float
    max_groups: int

    @abstractmethod
    def probability_of_keep(self, n: ArrayLike) -> float | np.ndarray:
        """``π(n)``: probability that a partition with ``n`` distinct units is released."""

    @abstractmethod
    def always_kept(self) -> float:
        """Smallest ``n`` with ``π(n) = 1`` exactly (``math.inf`` if there is none); counting the
        distinct units of a partition can stop there."""

    @abstractmethod
    def keep(self, counts: np.ndarray, rng: RandomLike = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Sample the release decision for every partition: ``(mask, noisy_counts)``;
        ``noisy_counts`` is ``None`` unless the primitive produces a releasable noisy count.
        ``rng`` (a numpy Generator, seed or :class:`planner.noise.RandomSource`) is for tests; by
        default randomness comes from the OS CSPRNG (:func:`planner.noise.secure_rng`)."""

    def select(self, units: ArrayLike, rng: RandomLike = None) -> np.ndarray:
        """The release decision for partitions holding ``units`` distinct units each: a boolean mask.
        Counts are clipped where ``π`` reaches 1 (counting further changes nothing) and at 0; no
        partition, no decision (an empty mask). Total: any integer counts give a mask."""
        counts = np.maximum(np.asarray(units, dtype=np.int64).reshape(-1), 0)
        if counts.size == 0:
            return np.zeros(0, dtype=bool)
        always = self.always_kept()
        if math.isfinite(always):
            counts = np.minimum(counts, int(math.ceil(always)))
        mask, _ = self.keep(counts, rng=rng)
        return np.asarray(mask, dtype=bool).reshape(-1)

    @property
    @abstractmethod
    def noise_scale(self) -> float | None:
        """Scale of the noise added to counts (``None`` for the optimal primitive)."""

    @abstractmethod
    def _search_limit(self) -> int:
        """An integer ``n`` with ``π(n)`` at least any target below 1."""

    @abstractmethod
    def _parameters(self) -> str:
        """The primitive's own parameters, for :meth:`describe`."""

    def n_reaching(self, probability: float) -> float:
        """Real-valued ``n`` where ``π`` reaches ``probability`` (linear interpolation between integers)."""
        if not 0 <= probability <= 1:
            raise ValueError(f"probability must lie in [0, 1], got {probability!r}")
        if probability == 1:
            return self.always_kept()
        if self.delta == 0:
            return 0.0 if probability == 0 else math.inf
        return _real_n_reaching(lambda n: np.asarray(self.probability_of_keep(n)), probability, self._search_limit())

    def midpoint(self) -> float:
        """Real-valued ``n`` where ``P[keep] = 1/2`` (``math.inf`` when selection is impossible)."""
        return self.n_reaching(0.5)

    def describe(self) -> str:
        """One line for EXPLAIN: primitive, parameters, midpoint and where keys are always kept."""
        always = self.always_kept()
        always_text = f"always kept from n = {always}" if math.isfinite(always) else "never certain to be kept"
        count_text = "; its noisy count is released as the count" if self.reuses_noisy_count else ""
        return (
            f"{self.name} partition selection (epsilon={self.epsilon:g}, delta={self.delta:g}, "
            f"max_groups={self.max_groups}; {self._parameters()}): P[keep] = 1/2 at n = {self.midpoint():.2f}, "
            f"{always_text}{count_text}"
        )


# --------------------------------------------------------------------------------------------
# The optimal primitive (Desfontaines 2020, Theorems 13 and 14)


def _growth_lower_bound(epsilon: float) -> Fraction:
    """A rational ``L`` with ``1 ≤ L ≤ e^ε`` and denominator 2^128, within about 2^-48 of e^ε
    (ε above 40 is treated as 40, which only lowers ``L``)."""
    excess = Fraction(math.expm1(min(epsilon, _GROWTH_EPSILON_CAP))) * (1 - Fraction(_GROWTH_MARGIN))
    return 1 + Fraction(math.floor(excess * (1 << _GROWTH_BITS)), 1 << _GROWTH_BITS)


@dataclass(frozen=True, eq=False)
class _OptimalGrid:
    """The optimal primitive's keep probabilities as integers ``π(n)·2^62``, exactly (ε, δ)-DP.

    The recurrence ``π(n) = min(L π(n−1) + δ, 1 + (π(n−1) + δ − 1)/L, 1)`` of docs/math.md §6 is run in
    integer arithmetic with ``L ≤ e^ε`` (:func:`_growth_lower_bound`) and ``δ`` rounded down to the
    grid, each step rounded down to the grid from the previous *rounded* value. So for every ``n``
    both DP inequalities hold exactly for the values the sampler uses:
    ``π(n) ≤ e^ε π(n−1) + δ`` and ``1 − π(n−1) ≤ e^ε (1 − π(n)) + δ`` — no floating-point value near 1
    is ever trusted (in doubles, ``1 − π`` loses its digits exactly where ``e^ε`` amplifies them).
    After :data:`EXACT_STEPS` units the numerators grow by ``δ`` per unit (a (0, δ)-DP step, so both
    inequalities still hold, as ``L ≥ 1``).
    """

    numerators: np.ndarray  # π(0 … m)·2^62 (int64), m ≤ EXACT_STEPS
    step: int  # δ·2^62 rounded down: the growth per unit after the table
    always_kept: int  # first n with π(n) = 1

    @classmethod
    def of(cls, epsilon: float, delta: float) -> _OptimalGrid:
        growth = _growth_lower_bound(epsilon)
        scaled, denominator = growth.numerator, growth.denominator  # L = scaled / denominator
        step = math.floor(Fraction(delta) * _GRID)
        numerators = [0]
        while numerators[-1] < _GRID and len(numerators) <= EXACT_STEPS:
            previous = numerators[-1]
            grown = previous * scaled // denominator + step
            missing = _GRID - previous - step  # (1 − π(n−1) − δ)·2^62
            approached = _GRID - (-(-missing * denominator // scaled)) if missing > 0 else _GRID
            numerators.append(min(grown, approached, _GRID))
        last = numerators[-1]
        always_kept = len(numerators) - 1 if last == _GRID else len(numerators) - 1 + -(-(_GRID - last) // step)
        return cls(np.array(numerators, dtype=np.int64), step, always_kept)

    def numerator(self, counts: np.ndarray) -> np.ndarray:
        """``π(counts)·2^62`` (int64)."""
        last = len(self.numerators) - 1
        tabulated = self.numerators[np.minimum(counts, last)]
        beyond = np.minimum(np.maximum(counts - last, 0), max(self.always_kept - last, 0))
        return np.where(counts >= self.always_kept, _GRID, np.minimum(tabulated + beyond * self.step, _GRID))


def optimal_keep_probabilities_by_recurrence(epsilon: float, delta: float, n_max: int) -> np.ndarray:
    """``π(0), …, π(n_max)`` of the real-valued optimal primitive from Desfontaines 2020's recurrence
    ``π(n) = min(e^ε π(n−1) + δ, 1 + e^{−ε}(π(n−1) + δ − 1), 1)``, in 60-digit decimal arithmetic
    (a reference for the grid the sampler uses; it dominates every (ε, δ)-DP primitive)."""
    _validate(epsilon, delta, 1)
    with decimal.localcontext() as context:
        context.prec = 60
        growth = decimal.Decimal(epsilon).exp()
        exact_delta, one = decimal.Decimal(delta), decimal.Decimal(1)
        probabilities = [decimal.Decimal(0)]
        for _ in range(n_max):
            previous = probabilities[-1]
            probabilities.append(min(growth * previous + exact_delta, one + (previous + exact_delta - one) / growth, one))
        return np.array([float(p) for p in probabilities])


@dataclass(frozen=True)
class OptimalSelection(PartitionSelection):
    """The optimal (ε, δ) primitive, run with ``(ε/k, δ/k)`` per partition for ``k = max_groups``.

    Keep probabilities are exact multiples of 2^-62 that satisfy both DP inequalities exactly
    (:class:`_OptimalGrid`), and :meth:`keep` realizes them exactly. ``δ = 0`` gives ``π ≡ 0``
    (selection impossible, see :func:`require_selection_possible`); ``ε = 0`` gives
    ``π(n) = min(n δ, 1)`` (δ rounded down to the grid).
    """

    epsilon: float
    delta: float
    max_groups: int = 1
    name: ClassVar[str] = "optimal"
    reuses_noisy_count: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _validate(self.epsilon, self.delta, self.max_groups)

    @property
    def partition_epsilon(self) -> float:
        return self.epsilon / self.max_groups

    @property
    def partition_delta(self) -> float:
        return self.delta / self.max_groups

    @property
    def noise_scale(self) -> None:
        return None

    @cached_property
    def _grid(self) -> _OptimalGrid | None:
        return None if self.delta == 0 else _OptimalGrid.of(self.partition_epsilon, self.partition_delta)

    def keep_numerator(self, n: ArrayLike) -> np.ndarray:
        """``π(n)·2^62`` exactly, as int64: what :meth:`keep` compares a uniform integer with."""
        counts = _counts_array(n)
        return np.zeros(counts.shape, dtype=np.int64) if self._grid is None else self._grid.numerator(counts)

    def probability_of_keep(self, n: ArrayLike) -> float | np.ndarray:
        probability = np.ldexp(self.keep_numerator(n).astype(np.float64), -KEEP_PROBABILITY_BITS)
        return float(probability) if probability.ndim == 0 else probability

    def always_kept(self) -> float:
        return math.inf if self._grid is None else self._grid.always_kept

    def _search_limit(self) -> int:
        return int(self.always_kept())

    def keep(self, counts: np.ndarray, rng: RandomLike = None) -> tuple[np.ndarray, None]:
        numerators = self.keep_numerator(counts)
        return as_source(rng).integers(_GRID, size=numerators.shape) < numerators, None

    def _parameters(self) -> str:
        return f"per partition epsilon={self.partition_epsilon:g}, delta={self.partition_delta:g}"


def optimal(epsilon: float, delta: float, max_groups: int = 1) -> OptimalSelection:
    """The optimal primitive. ``optimal(1, 1e-5).midpoint()`` is about 11.37."""
    return OptimalSelection(epsilon, delta, max_groups)


# --------------------------------------------------------------------------------------------
# Thresholding with integer noise


class _SymmetricIntegerNoise(ABC):
    """A symmetric distribution on the integers."""

    @property
    @abstractmethod
    def scale(self) -> float:
        """The distribution's scale parameter (Laplace ``b``, Gaussian ``σ``)."""

    @property
    @abstractmethod
    def support_bound(self) -> int:
        """``P[|Z| > support_bound]`` is negligible (below 1e-60)."""

    @abstractmethod
    def pmf(self, values: np.ndarray) -> np.ndarray:
        """``P[Z = z]``."""

    @abstractmethod
    def survival(self, values: np.ndarray) -> np.ndarray:
        """``P[Z >= z]``."""

    @abstractmethod
    def sample(self, size: int | tuple[int, ...], source: RandomSource) -> np.ndarray:
        """Independent exact integer draws (:mod:`planner.noise`)."""


@dataclass(frozen=True)
class _DiscreteLaplace(_SymmetricIntegerNoise):
    """``P[Z = z] = (1 − t)/(1 + t) t^{|z|}`` with ``t = e^{−1/b}``; ``b`` must be a scale the exact
    sampler uses as is (see :func:`planner.noise.laplace_scale_used`)."""

    laplace_scale: float

    @property
    def scale(self) -> float:
        return self.laplace_scale

    @property
    def _ratio(self) -> float:
        return math.exp(-1 / self.laplace_scale)

    @property
    def support_bound(self) -> int:
        return math.ceil(math.log(_NEGLIGIBLE_MASS) / math.log(self._ratio)) + 1

    def pmf(self, values: np.ndarray) -> np.ndarray:
        t = self._ratio
        return (1 - t) / (1 + t) * t ** np.abs(values)

    def survival(self, values: np.ndarray) -> np.ndarray:
        t = self._ratio
        upper_tail = t ** np.maximum(values, 1) / (1 + t)  # P[Z >= z] for z >= 1
        lower_tail = t ** np.maximum(1 - values, 1) / (1 + t)  # P[Z <= z − 1] for z <= 0
        return np.where(values >= 1, upper_tail, 1 - lower_tail)

    def sample(self, size: int | tuple[int, ...], source: RandomSource) -> np.ndarray:
        return discrete_laplace(self.laplace_scale, size, rng=source)


# Above this many multiply-adds a convolution runs by FFT, whose absolute error (~1e-16 of the
# peak) limits the accuracy of tail probabilities; below it the direct sum keeps relative accuracy.
_DIRECT_CONVOLUTION_WORK = 2 * 10**8


def _convolve_trimmed(first: tuple[int, np.ndarray], second: tuple[int, np.ndarray]) -> tuple[int, np.ndarray]:
    """Law of the sum of two independent integer variables given as ``(lowest value, pmf)``, with
    outer tails of mass below 1e-60 cut off (the sum concentrates on far fewer values than its range)."""
    (first_low, first_pmf), (second_low, second_pmf) = first, second
    if first_pmf.size * second_pmf.size <= _DIRECT_CONVOLUTION_WORK:
        pmf = np.convolve(first_pmf, second_pmf)
    else:
        pmf = np.clip(fft_convolve(first_pmf, second_pmf), 0, None)
    start = int(np.searchsorted(np.cumsum(pmf), _NEGLIGIBLE_MASS, side="right"))
    stop = pmf.size - int(np.searchsorted(np.cumsum(pmf[::-1]), _NEGLIGIBLE_MASS, side="right"))
    return first_low + second_low + start, pmf[start:stop] / pmf[start:stop].sum()


@dataclass(frozen=True)
class _DiscreteGaussian(_SymmetricIntegerNoise):
    """``P[Z = z] ∝ exp(−z²/(2σ²))`` (Canonne, Kamath, Steinke 2020), tabulated on its support;
    ``σ²`` must be a value the exact sampler uses as is (see :func:`planner.noise.gaussian_sigma2_used`)."""

    sigma2: float

    @property
    def sigma(self) -> float:
        return math.sqrt(self.sigma2)

    @property
    def scale(self) -> float:
        return self.sigma

    @property
    def support_bound(self) -> int:
        return math.ceil(self.sigma * math.sqrt(-2 * math.log(_NEGLIGIBLE_MASS))) + 1

    @cached_property
    def _table(self) -> tuple[np.ndarray, np.ndarray]:
        """pmf and ``P[Z >= z]`` on ``−support_bound … support_bound``."""
        values = np.arange(-self.support_bound, self.support_bound + 1)
        weights = np.exp(-(values.astype(float) ** 2) / (2 * self.sigma2))
        pmf = weights / weights.sum()
        return pmf, np.cumsum(pmf[::-1])[::-1]

    def pmf(self, values: np.ndarray) -> np.ndarray:
        pmf, _ = self._table
        index = np.asarray(values) + self.support_bound
        inside = (index >= 0) & (index < pmf.size)
        return np.where(inside, pmf[np.clip(index, 0, pmf.size - 1)], 0.0)

    def survival(self, values: np.ndarray) -> np.ndarray:
        _, survival = self._table
        index = np.asarray(values) + self.support_bound
        return np.where(index < 0, 1.0, np.where(index >= survival.size, 0.0, survival[np.clip(index, 0, survival.size - 1)]))

    def sample(self, size: int | tuple[int, ...], source: RandomSource) -> np.ndarray:
        return discrete_gaussian(self.sigma2, size, rng=source)

    def sum_survival(self, terms: int) -> tuple[int, np.ndarray]:
        """``(low, tail)`` with ``tail[i] = P[Z₁ + … + Z_terms >= low + i]`` for i.i.d. copies."""
        pmf, _ = self._table
        power: tuple[int, np.ndarray] = (-self.support_bound, pmf)
        total: tuple[int, np.ndarray] | None = None
        remaining = terms
        while remaining:  # convolution power by repeated squaring
            if remaining & 1:
                total = power if total is None else _convolve_trimmed(total, power)
            remaining >>= 1
            if remaining:
                power = _convolve_trimmed(power, power)
        low, distribution = total
        return low, np.cumsum(distribution[::-1])[::-1]

    def privacy_delta(self, epsilon: float, shifted_coordinates: int) -> float:
        """Exact δ(ε) of adding i.i.d. discrete Gaussians to an integer vector whose neighbour
        differs by 1 in ``shifted_coordinates`` coordinates (L2 sensitivity ``√j``).

        With ``S`` the sum of ``j`` copies, the privacy loss is ``(j − 2S)/(2σ²)`` and
        ``δ = P[S > εσ² − j/2] − e^ε P[S > εσ² + j/2]`` (CKS 2020, Theorem 7 for ``j = 1``).
        """
        low, tail = self.sum_survival(shifted_coordinates)

        def strictly_above(x: float) -> float:
            index = math.floor(x) + 1 - low
            return 1.0 if index <= 0 else (0.0 if index >= tail.size else float(tail[index]))

        boundary = epsilon * self.sigma2
        half_shift = shifted_coordinates / 2
        return max(0.0, strictly_above(boundary - half_shift) - math.exp(epsilon) * strictly_above(boundary + half_shift))


@dataclass(frozen=True)
class _Threshold:
    """Keep when ``n + Z >= T``, or when ``n + Z = T − 1`` with probability ``q``."""

    noise: _SymmetricIntegerNoise
    threshold: int
    tie_probability: float

    @classmethod
    def with_tail(cls, noise: _SymmetricIntegerNoise, tail: float) -> _Threshold:
        """The lowest threshold whose keep probability at ``n = 1`` equals ``tail`` exactly."""
        # smallest m = T − 1 with P[Z >= m] <= tail (P[Z >= m] is non-increasing in m)
        low, high = -noise.support_bound - 1, noise.support_bound + 1
        while high - low > 1:
            middle = (low + high) // 2
            if noise.survival(np.array(middle)) <= tail:
                high = middle
            else:
                low = middle
        spent = float(noise.survival(np.array(high)))
        tie_mass = float(noise.pmf(np.array(high - 1)))
        tie = min(1.0, max(0.0, (tail - spent) / tie_mass)) if tie_mass > 0 else 0.0
        return cls(noise, high + 1, tie)

    def probability(self, counts: np.ndarray) -> np.ndarray:
        distance = self.threshold - counts
        probability = self.noise.survival(distance) + self.tie_probability * self.noise.pmf(distance - 1)
        return np.where(counts > 0, np.minimum(probability, 1.0), 0.0)

    def keep(self, counts: np.ndarray, source: RandomSource) -> tuple[np.ndarray, np.ndarray]:
        counts = _counts_array(counts)
        noisy = counts + self.noise.sample(counts.shape, source)
        tie_kept = (noisy == self.threshold - 1) & (source.uniform(counts.shape) < self.tie_probability)
        return (counts > 0) & ((noisy >= self.threshold) | tie_kept), noisy

    def midpoint(self) -> float:
        return _real_n_reaching(self.probability, 0.5, self.threshold + self.noise.support_bound + 1)


class _ThresholdingSelection(PartitionSelection):
    """Shared behaviour of the thresholding primitives (their noisy counts are releasable)."""

    reuses_noisy_count: ClassVar[bool] = True

    @property
    @abstractmethod
    def _rule(self) -> _Threshold: ...

    @property
    def noise_scale(self) -> float:
        return self._rule.noise.scale

    @property
    def threshold(self) -> int:
        """Integer threshold ``T``: keep when ``n + Z >= T`` (or ``= T − 1`` with :attr:`tie_probability`)."""
        return self._rule.threshold

    @property
    def tie_probability(self) -> float:
        return self._rule.tie_probability

    def probability_of_keep(self, n: ArrayLike) -> float | np.ndarray:
        probability = self._rule.probability(_counts_array(n))
        return float(probability) if probability.ndim == 0 else probability

    def always_kept(self) -> float:
        """Noise with unbounded support never keeps a key with certainty: ``math.inf``."""
        return math.inf

    def _search_limit(self) -> int:
        return self._rule.threshold + self._rule.noise.support_bound + 1

    def keep(self, counts: np.ndarray, rng: RandomLike = None) -> tuple[np.ndarray, np.ndarray]:
        return self._rule.keep(counts, as_source(rng))

    def kept_squared_error(self, n: ArrayLike) -> float | np.ndarray:
        """``E[Z² · 1{kept}]`` for a partition with ``n`` units: the expected squared error of its
        released noisy count ``n + Z``, counted only when it is kept (kept partitions have larger
        ``Z`` than average, so this exceeds ``π(n)·Var Z`` near the threshold)."""
        counts = _counts_array(n)
        rule = self._rule
        noise = np.arange(-rule.noise.support_bound, rule.noise.support_bound + 1)
        lowest_kept = rule.threshold - counts[..., None]  # n + z >= T
        weight = np.where(noise >= lowest_kept, 1.0, np.where(noise == lowest_kept - 1, rule.tie_probability, 0.0))
        moment = (weight * rule.noise.pmf(noise) * noise.astype(float) ** 2).sum(axis=-1)
        moment = np.where(counts > 0, moment, 0.0)
        return float(moment) if moment.ndim == 0 else moment


def _require_thresholding_possible(name: str, epsilon: float, delta: float, max_groups: int) -> None:
    _validate(epsilon, delta, max_groups)
    require_selection_possible(delta)
    if epsilon == 0:
        raise ValueError(f"{name} thresholding needs epsilon > 0; with epsilon = 0 use the optimal primitive")


def _union_tail(delta_tail: float, max_groups: int) -> float:
    """Per-partition keep probability ``p`` at ``n = 1`` with ``1 − (1 − p)^k = δ_tail``."""
    return -math.expm1(math.log1p(-delta_tail) / max_groups)


@dataclass(frozen=True)
class LaplaceThresholding(_ThresholdingSelection):
    """``n + Z`` with ``Z`` discrete Laplace of scale ``k/ε`` is ε-DP for ``k`` partitions (L1
    sensitivity ``k``); the keep probability ``p`` at ``n = 1`` satisfies ``1 − (1 − p)^k = δ``
    (``p = δ`` for ``k = 1``), which bounds the chance that any new key of a unit is released."""

    epsilon: float
    delta: float
    max_groups: int = 1
    name: ClassVar[str] = "Laplace thresholding"

    def __post_init__(self) -> None:
        _require_thresholding_possible("Laplace", self.epsilon, self.delta, self.max_groups)

    @cached_property
    def _rule(self) -> _Threshold:
        noise = _DiscreteLaplace(float(laplace_scale_used(self.max_groups / self.epsilon)))
        return _Threshold.with_tail(noise, _union_tail(self.delta, self.max_groups))

    def _parameters(self) -> str:
        return f"discrete Laplace scale {self.noise_scale:g}, threshold {self.threshold}, tie keep {self.tie_probability:.3f}"


def laplace_threshold(epsilon: float, delta: float, max_groups: int = 1) -> LaplaceThresholding:
    """Laplace thresholding with discrete Laplace noise; ``laplace_threshold(1, 1e-5).midpoint()`` ≈ 11.7."""
    return LaplaceThresholding(epsilon, delta, max_groups)


def _smallest_sigma(epsilon: float, delta_noise: float, coordinates: int) -> float:
    """Smallest σ (relative precision 1e-10) whose discrete Gaussian is (ε, delta_noise)-DP at L2
    sensitivity ``√coordinates`` (unit shifts): Brent's method on ``log δ(σ)``, δ(σ) exact."""

    def log_excess(sigma: float) -> float:
        achieved = _DiscreteGaussian(sigma**2).privacy_delta(epsilon, coordinates)
        return math.log(max(achieved, 1e-300)) - math.log(delta_noise)

    high = math.sqrt(coordinates * 2 * math.log(1.25 / delta_noise)) / epsilon  # classic bound as a start
    while log_excess(high) > 0:
        high *= 2
    low = high / 2
    while log_excess(low) <= 0:
        high, low = low, low / 2
    from scipy import optimize  # imported when first needed: scipy.optimize costs ~0.3 s at import

    sigma = optimize.brentq(log_excess, low, high, xtol=1e-12, rtol=1e-10)
    while log_excess(sigma) > 0:  # the root may sit a rounding error on the wrong side
        sigma *= 1 + 1e-10
    return sigma


def _gaussian_rule(epsilon: float, delta_noise: float, delta_tail: float, max_groups: int) -> _Threshold:
    # rounding σ² up to what the exact sampler uses only lowers δ_noise; the tail is computed for it
    noise = _DiscreteGaussian(float(gaussian_sigma2_used(_smallest_sigma(epsilon, delta_noise, max_groups) ** 2)))
    return _Threshold.with_tail(noise, _union_tail(delta_tail, max_groups))


@dataclass(frozen=True)
class GaussianThresholding(_ThresholdingSelection):
    """Keep when ``n + Z >= T`` with ``Z`` discrete Gaussian; the noisy count is releasable.

    Privacy accounting (neighbours differ by one unit in at most ``k = max_groups`` partitions,
    ``m`` of which go from 0 to 1 units): the existing partitions see a discrete Gaussian mechanism
    with L2 sensitivity ``√(k − m)``, whose exact ``δ_noise(ε)`` is computed from the distribution
    of a sum of discrete Gaussians (:meth:`_DiscreteGaussian.privacy_delta`); the new partitions are
    all suppressed except with probability ``1 − (1 − p)^m``, ``p = π(1)``. Both directions of the
    DP inequality then hold with ``δ_m = δ_noise(√(k − m)) + 1 − (1 − p)^m`` (adding the unit: the
    event "a new key is released" costs its probability; removing it: with ``E`` = "no new key
    released", ``P[S] − e^ε P'[S] ≤ P'[E](P[S] − e^ε P_old'[S]) + (1 − P'[E]) P[S]``).

    * ``k = 1``: ``m`` is 0 or 1, so ``δ = max(δ_noise(1), p)``; σ is the smallest with
      ``δ_noise = δ`` and ``p = δ`` (no split is needed).
    * ``k > 1``: every ``δ_m ≤ δ_noise(√k) + δ_tail`` with ``1 − (1 − p)^k = δ_tail``; the split
      ``δ_noise = f δ``, ``δ_tail = (1 − f) δ`` is chosen to minimise the midpoint (grid over f,
      then bounded Brent).

    σ is the smallest with exact discrete-Gaussian ``δ_noise(ε) ≤ f δ`` (the discrete analogue of
    Balle & Wang's analytic Gaussian), then rounded up to what :mod:`planner.noise` samples.
    """

    epsilon: float
    delta: float
    max_groups: int = 1
    name: ClassVar[str] = "Gaussian thresholding"

    def __post_init__(self) -> None:
        _require_thresholding_possible("Gaussian", self.epsilon, self.delta, self.max_groups)

    @cached_property
    def noise_delta_fraction(self) -> float:
        """Fraction of δ spent by the Gaussian noise (for k > 1 the rest bounds the release of new
        keys; for k = 1 both parts may use all of δ)."""
        if self.max_groups == 1:
            return 1.0

        def midpoint_for(fraction: float) -> float:
            return self._rule_for(fraction).midpoint()

        from scipy import optimize  # imported when first needed (~0.3 s)

        grid = np.linspace(0.1, 0.9, 9)
        best = grid[int(np.argmin([midpoint_for(f) for f in grid]))]
        refined = optimize.minimize_scalar(
            midpoint_for, bounds=(max(best - 0.1, 0.01), min(best + 0.1, 0.99)), method="bounded",
            options={"xatol": 5e-3},
        )
        return float(refined.x)

    @property
    def noise_delta(self) -> float:
        """δ spent by the Gaussian noise on keys present in both neighbours."""
        return self.noise_delta_fraction * self.delta

    @property
    def new_key_delta(self) -> float:
        """Bound on the probability that any of a unit's new keys (count 1) is released."""
        return self.delta if self.max_groups == 1 else (1 - self.noise_delta_fraction) * self.delta

    def _rule_for(self, fraction: float) -> _Threshold:
        if self.max_groups == 1:
            return _gaussian_rule(self.epsilon, self.delta, self.delta, 1)
        return _gaussian_rule(self.epsilon, fraction * self.delta, (1 - fraction) * self.delta, self.max_groups)

    @cached_property
    def _rule(self) -> _Threshold:
        return self._rule_for(self.noise_delta_fraction)

    def _parameters(self) -> str:
        split = "" if self.max_groups == 1 else f", {self.noise_delta_fraction:.0%} of delta to the noise"
        return (
            f"discrete Gaussian sigma {self.noise_scale:.4g}, threshold {self.threshold}, "
            f"tie keep {self.tie_probability:.3f}{split}"
        )


def gaussian_threshold(epsilon: float, delta: float, max_groups: int = 1) -> GaussianThresholding:
    """Gaussian thresholding with discrete Gaussian noise and the δ accounting of
    :class:`GaussianThresholding`."""
    return GaussianThresholding(epsilon, delta, max_groups)


@lru_cache(maxsize=256)
def choose(epsilon: float, delta: float, max_groups: int = 1) -> PartitionSelection:
    """The primitive the engine uses: for one partition per unit the optimal primitive (it
    dominates all others); for ``max_groups > 1`` the split optimal primitive or Gaussian
    thresholding, whichever has the lower midpoint. Its :meth:`~PartitionSelection.describe`
    says which was chosen. Raises :class:`PartitionSelectionImpossibleError` when δ = 0.
    Results are cached: designing Gaussian thresholding for large ``max_groups`` takes seconds."""
    _validate(epsilon, delta, max_groups)
    require_selection_possible(delta)
    split_optimal = optimal(epsilon, delta, max_groups)
    if max_groups == 1 or epsilon == 0:
        return split_optimal
    gaussian = gaussian_threshold(epsilon, delta, max_groups)
    return gaussian if gaussian.midpoint() < split_optimal.midpoint() else split_optimal
