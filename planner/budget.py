"""Optimal non-uniform noise budgets (docs/math.md §2) and the noise they buy.

Closed forms for strategies with the grouping property: group ``g`` has recovery mass ``a_g`` (how much
of the workload's error each unit of its noise variance causes) and column magnitude ``C_g``.

>>> budgets = laplace_budgets([2.0, 4.0], [1.0, 1.0], epsilon=1.0)   # Cormode et al. 2013, Figure 1, R = I
>>> round(grouped_error([2.0, 4.0], [1.0, 1.0], budgets, Privacy.laplace(1.0)), 2)
46.17

For strategies without grouping, :func:`optimal_row_budgets_cvx` solves the general convex program.
:func:`noise_for_group` turns a group budget into the discrete noise parameter actually used and the
exact variance of that noise (``planner.noise`` rounds parameters up to a dyadic rational).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from planner import noise
from planner.privacy import Privacy


class BudgetError(ValueError):
    """Budgets cannot be allocated as asked (no group carries any workload mass, bad inputs)."""


def _checked_masses(masses: Sequence[float], magnitudes: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    mass = np.asarray(masses, dtype=float)
    magnitude = np.asarray(magnitudes, dtype=float)
    if mass.shape != magnitude.shape or mass.ndim != 1:
        raise BudgetError(f"masses {mass.shape} and magnitudes {magnitude.shape} must be equal-length vectors")
    if (mass < 0).any() or (magnitude <= 0).any() or not np.isfinite(mass).all():
        raise BudgetError("recovery masses must be ≥ 0 and finite, magnitudes C_g > 0")
    if not (mass > 0).any():
        raise BudgetError("no group carries any workload mass; nothing to budget")
    return mass, magnitude


def laplace_split(masses: Sequence[float], magnitudes: Sequence[float], epsilon: float) -> np.ndarray:
    """``ε_g = ε (a_g C_g²)^{1/3} / Σ_h (a_h C_h²)^{1/3}`` in floating point: minimises
    ``Σ_g 2 a_g (k C_g/ε_g)²``. The shares may exceed ``ε`` by ulps: inside an optimisation loop that is
    harmless; what is released goes through :func:`within` (or :func:`laplace_budgets`)."""
    mass, magnitude = _checked_masses(masses, magnitudes)
    weight = np.cbrt(mass * magnitude**2)
    return epsilon * weight / weight.sum()


def gaussian_split(masses: Sequence[float], magnitudes: Sequence[float], rho: float) -> np.ndarray:
    """``ρ_g = ρ √a_g C_g / Σ_h √a_h C_h`` in floating point: minimises ``Σ_g a_g k² C_g² / (2ρ_g)``
    (unchecked like :func:`laplace_split`)."""
    mass, magnitude = _checked_masses(masses, magnitudes)
    weight = np.sqrt(mass) * magnitude
    return rho * weight / weight.sum()


def optimal_split(masses: Sequence[float], magnitudes: Sequence[float], privacy: Privacy) -> np.ndarray:
    """The §2 closed form for the privacy spec's family, unchecked (for optimisation loops)."""
    if privacy.is_laplace:
        return laplace_split(masses, magnitudes, privacy.epsilon)
    return gaussian_split(masses, magnitudes, privacy.rho)


def laplace_budgets(masses: Sequence[float], magnitudes: Sequence[float], epsilon: float) -> np.ndarray:
    """:func:`laplace_split` made to sum to at most ``ε`` exactly."""
    return within(laplace_split(masses, magnitudes, epsilon), epsilon)


def gaussian_budgets(masses: Sequence[float], magnitudes: Sequence[float], rho: float) -> np.ndarray:
    """:func:`gaussian_split` made to sum to at most ``ρ`` exactly."""
    return within(gaussian_split(masses, magnitudes, rho), rho)


def optimal_budgets(masses: Sequence[float], magnitudes: Sequence[float], privacy: Privacy) -> np.ndarray:
    """The §2 closed form for the privacy spec's family (ε_g or ρ_g per group), exactly within the spec."""
    return within(optimal_split(masses, magnitudes, privacy), privacy.epsilon if privacy.is_laplace else privacy.rho)


def exact_sum(values: np.ndarray) -> Fraction:
    """The exact rational sum of finite floats, on integers: every double is ``m·2^e`` with an integer
    ``m`` of at most 53 bits, so over the common denominator ``2^{−min e}`` the sum is one integer sum."""
    mantissas, exponents = np.frexp(np.asarray(values, dtype=float).ravel())
    integers = (mantissas * 2.0**53).astype(np.int64).tolist()  # exact: |mantissa| < 1 has 53 bits
    powers = (exponents.astype(np.int64) - 53).tolist()
    if not integers:
        return Fraction(0)
    lowest = min(powers)
    numerator = sum(m << (e - lowest) for m, e in zip(integers, powers))
    return Fraction(numerator, 1 << -lowest) if lowest < 0 else Fraction(numerator << lowest)


def within(budgets: Sequence[float] | np.ndarray, total: float) -> np.ndarray:
    """``budgets`` with the largest lowered by their exact excess over ``total`` (rounded down to a
    float), so that their exact rational sum is at most ``total``: a split computed in floating point
    (``total·w_g/Σw``) can exceed the spec by a few ulps, and sequential composition needs
    ``Σ_g ε_g ≤ ε`` exactly. One exact check on integers (:func:`exact_sum`), not a loop of fractions."""
    result = np.array(budgets, dtype=float)
    if not result.size:
        return result
    if not np.isfinite(result).all() or (result < 0).any():
        raise BudgetError(f"budgets must be finite and ≥ 0, got {result!r}")
    if math.fsum(result) > total * (1 + 1e-9):
        raise BudgetError(f"budgets summing to {math.fsum(result)!r} exceed {total!r} by more than rounding")
    limit = Fraction(total)
    excess = exact_sum(result) - limit
    while excess > 0:
        largest = int(np.argmax(result))
        target = Fraction(result[largest]) - excess
        if target < 0:
            raise BudgetError(f"budgets {result!r} cannot be brought within {total!r} by their largest share")
        lowered = float(target)
        if Fraction(lowered) > target:  # float() rounds to nearest; the share must not exceed the target
            lowered = math.nextafter(lowered, 0.0)
        result[largest] = lowered
        excess = exact_sum(result) - limit  # ≤ 0 now; checked again rather than assumed
    return result


def grouped_error(
    masses: Sequence[float], magnitudes: Sequence[float], budgets: Sequence[float], privacy: Privacy, contributions: int = 1
) -> float:
    """``Σ_g a_g · Var_g`` with the papers' continuous noise: ``2(k C_g/ε_g)²`` or ``k² C_g²/(2ρ_g)``."""
    mass, magnitude = _checked_masses(masses, magnitudes)
    budget = np.asarray(budgets, dtype=float)
    if privacy.is_laplace:
        variance = continuous_laplace_variance(contributions * magnitude / budget)
    else:
        variance = (contributions * magnitude) ** 2 / (2 * budget)
    return float(mass @ variance)


def continuous_laplace_variance(scale: float | np.ndarray) -> float | np.ndarray:
    """``2b²``, the variance of continuous Laplace noise (the papers' figures use it)."""
    return 2.0 * np.asarray(scale, dtype=float) ** 2


@dataclass(frozen=True)
class Sensitivity:
    """How one privacy unit moves the data: at most ``rows`` rows, optionally in distinct cells of every
    measured marginal (then Gaussian L2 sensitivity of a marginal group is ``√rows``, docs/math.md §1)."""

    rows: int = 1
    distinct_cells: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.rows, bool) or not isinstance(self.rows, int) or self.rows < 1:
            raise ValueError(f"contributions must be a positive integer number of rows, got {self.rows!r}")

    def laplace_scale(self, magnitude: float, epsilon: float) -> float:
        """``b = k C / ε`` (L1 sensitivity is unaffected by the distinct-cells bound)."""
        return self.rows * magnitude / epsilon

    def gaussian_sigma2(self, squared_magnitude: float, rho: float, distinct_applies: bool = False) -> float:
        """``σ² = k² C² / (2ρ)``, or ``k C² / (2ρ)`` when the distinct-cells bound applies to the group."""
        factor = self.rows if (self.distinct_cells and distinct_applies) else self.rows**2
        return factor * squared_magnitude / (2.0 * rho)


@dataclass(frozen=True)
class GroupNoise:
    """The discrete noise one group of rows receives."""

    family: str  # "laplace" or "gaussian"
    parameter: float  # discrete Laplace scale b, or discrete Gaussian σ², as requested
    variance: float  # exact variance of the discrete noise actually sampled
    continuous_variance: float  # 2b² or σ²: what the papers' continuous analysis uses


def sample_noise(privacy: Privacy, parameters: np.ndarray, rng: noise.RandomLike) -> np.ndarray:
    """Discrete noise for many rows: Laplace scales or Gaussian σ², elementwise, one sampler call per
    :data:`NOISE_CHUNK` rows (the exact samplers hold a few hundred bytes of work per sample: twenty
    million at once would need gigabytes)."""
    values = np.asarray(parameters, dtype=float)
    if values.size == 0:
        return np.zeros(values.shape, dtype=np.int64)
    sampler = noise.discrete_laplace if privacy.is_laplace else noise.discrete_gaussian
    if values.size <= NOISE_CHUNK:
        return sampler(values, rng=rng)
    source = noise.as_source(rng)  # one stream for every chunk
    flat = values.reshape(-1)
    drawn = np.empty(flat.size, dtype=np.int64)  # filled chunk by chunk: no list of chunks beside the whole
    for start in range(0, flat.size, NOISE_CHUNK):
        drawn[start : start + NOISE_CHUNK] = sampler(flat[start : start + NOISE_CHUNK], rng=source)
    return drawn.reshape(values.shape)


NOISE_CHUNK = 1 << 18


GAUSSIAN_FLAT_FROM = 4.0
"""From this σ² on, the discrete Gaussian's variance is σ² (rounded as sampled) to double precision:
its deficit is below ``8π²σ⁴e^{−2π²σ²} < 10^{−30}σ²`` (Poisson summation, see ``planner.noise``)."""


def discrete_variance(family: str, parameters: np.ndarray | float) -> np.ndarray:
    """Exact variance of the discrete noise sampled for each parameter (Laplace scale or Gaussian σ²),
    vectorized: ``planner.noise`` evaluates the Gaussian series one value at a time, which is only
    needed below :data:`GAUSSIAN_FLAT_FROM` (above, the series' correction is invisible in a double)."""
    values = np.asarray(parameters, dtype=float)
    if family == "laplace":
        return np.asarray(noise.discrete_laplace_variance(values), dtype=float)
    result = np.asarray(noise.gaussian_sigma2_used(values), dtype=float).copy()
    small = result < GAUSSIAN_FLAT_FROM
    if small.any():
        result[small] = noise.discrete_gaussian_variance(values[small])
    return result


def noise_for_group(
    privacy: Privacy,
    budget: float,
    sensitivity: Sensitivity,
    magnitude: float = 1.0,
    distinct_applies: bool = False,
) -> GroupNoise:
    """Noise for a group of column magnitude ``magnitude`` given budget ``ε_g`` or ``ρ_g``."""
    return noises_for_groups(privacy, [budget], sensitivity, magnitude, distinct_applies)[0]


def noises_for_groups(
    privacy: Privacy,
    budgets: Sequence[float] | np.ndarray,
    sensitivity: Sensitivity,
    magnitude: float = 1.0,
    distinct_applies: bool = False,
) -> tuple[GroupNoise, ...]:
    """:func:`noise_for_group` for many groups of the same magnitude, with one vectorized variance call."""
    budget = np.asarray(budgets, dtype=float)
    if not (budget > 0).all():
        raise BudgetError(f"a measured group needs a positive budget, got {budget[~(budget > 0)][0]}")
    if privacy.is_laplace:
        scale = sensitivity.laplace_scale(magnitude, 1.0) / budget
        variance = discrete_variance("laplace", scale)
        continuous = continuous_laplace_variance(scale)
        return tuple(GroupNoise("laplace", *values) for values in zip(scale.tolist(), variance.tolist(), continuous.tolist()))
    sigma2 = sensitivity.gaussian_sigma2(magnitude**2, 1.0, distinct_applies) / budget
    variance = discrete_variance("gaussian", sigma2)
    return tuple(GroupNoise("gaussian", *values) for values in zip(sigma2.tolist(), variance.tolist(), sigma2.tolist()))


def optimal_row_budgets_cvx(
    strategy: np.ndarray, masses: Sequence[float], privacy: Privacy, contributions: int = 1
) -> np.ndarray:
    """Per-row budgets for a strategy without grouping (docs/math.md §2, last paragraph), by cvxpy.

    Laplace: minimise ``Σ_i 2 a_i k²/ε_i²`` subject to ``Σ_i |S_ij| ε_i ≤ ε`` for every column ``j``.
    Gaussian (row ``i`` gets noise ``k²/(2 p_i)``, i.e. precision ``2p_i/k²``): minimise
    ``Σ_i a_i k²/(2 p_i)`` subject to ``Σ_i S_ij² p_i ≤ ρ`` for every column. Both are convex; rows with
    zero mass get zero budget. Returns ε_i (or p_i, the zCDP "per unit of S_ij²" share) per row.
    """
    import cvxpy as cp  # imported lazily: only strategies without grouping need it

    matrix = np.abs(np.asarray(strategy, dtype=float))
    mass = np.asarray(masses, dtype=float)
    if matrix.ndim != 2 or mass.shape != (matrix.shape[0],):
        raise BudgetError(f"need one mass per strategy row: strategy {matrix.shape}, masses {mass.shape}")
    used = mass > 0
    if not used.any():
        raise BudgetError("no strategy row carries any workload mass; nothing to budget")
    budget = cp.Variable(int(used.sum()), pos=True)
    if privacy.is_laplace:
        objective = 2 * contributions**2 * cp.sum(cp.multiply(mass[used], cp.power(budget, -2)))
        constraints = [matrix[used].T @ budget <= privacy.epsilon]
    else:
        objective = contributions**2 / 2 * cp.sum(cp.multiply(mass[used], cp.inv_pos(budget)))
        constraints = [(matrix[used] ** 2).T @ budget <= privacy.rho]
    cp.Problem(cp.Minimize(objective), constraints).solve()
    if budget.value is None:
        raise BudgetError("the convex budget program did not solve")
    result = np.zeros(matrix.shape[0])
    result[used] = budget.value
    return result
