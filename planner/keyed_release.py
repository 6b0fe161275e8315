"""Selecting group keys from the same noisy counts that are released (thresholding per key).

A statement grouping by a column with no public domain (``GROUP BY puma``, ``CUBE (puma, sex)``) has
two kinds of queries: those *per key* (a key's cells over the other attributes ``X``, its total) and
those *over all keys* (grouping sets without the key column: ``(sex)``, ``()``). This design measures

* every cell ``(key, x)`` of every key present in the data, with independent discrete noise of one
  parameter (Laplace scale ``b`` under ε-DP, Gaussian ``σ²`` under zCDP) — at the *key* share of the
  budget, for an L1 (L2) sensitivity of ``c = min(m, k·r)`` rows: a unit keeps at most ``k`` keys and
  ``r`` rows per key among at most ``m`` rows (``dpsql.keys``);
* the queries over all keys (the whole table, every row counted), by the planner's plan for them, at the
  *totals* share, with sensitivity ``m``;

and releases the cells of the keys whose noisy total (the sum of their noisy cells) reaches a
threshold ``τ``. The released cells are those noisy cells: selection costs no budget of its own, only δ.

**Privacy.** Let ``D′`` add one unit ``u`` to ``D``. Keys of ``D`` receive at most ``c`` of ``u``'s rows
in all: the whole measured vector over the keys of ``D`` is ε-DP (ρ-zCDP) by the key share, and
releasing a key of ``D`` or not is post-processing of it. The at most ``k`` keys that only ``u`` holds
get at most ``r`` rows each; such a key is released only if ``r' + S ≥ τ`` with ``r' ≤ r`` its true
total and ``S`` the sum of its ``|X|`` noise draws, so with probability at most
``P(S ≥ τ − r)`` — computed from the exact law of ``S`` (a convolution of the per-cell laws) when ``|X|``
is small, else bounded by Chernoff's inequality with the exact moment generating function of the
discrete Laplace law (the discrete Gaussian is sub-Gaussian with parameter ``σ²``, Canonne–Kamath–
Steinke 2020): ``δ_sel = k · P(S ≥ τ − r)``. ``τ`` is the least integer with ``δ_sel ≤ δ``. The totals
part is ε-DP (ρ-zCDP) on its own share. The statement is (ε, δ)-DP (or ρ-zCDP plus the (0, δ) part),
composed by addition — as the ledger charges it.

**Release** (:meth:`KeyedRelease.release`): the per-key cells of every present key (a ``keys × |X|`` integer
array; no key at all is a valid input and releases nothing) get their noise, drawn here from OS entropy,
and the mask of released keys is the thresholded noisy totals. Nothing there depends on the data beyond
the array itself, so it is total.

**The split.** The budget is split into a key share ``f`` and ``1 − f`` for the totals (``f = 1`` when
the statement has no query over all keys), on a grid, minimising — with each query family (a product of
the workload: a grouping set's counts) weighted once, whatever its number of rows, since the number of
keys is private — ``Σ_per-key w² max_n [π(n)·v + (1 − π(n))·(n·s/|X|)²] + Σ_totals w² · mean variance``, where a
key with ``n`` rows is dropped with probability ``1 − π(n)`` (then a row of squared norm ``s`` over its
``|X|`` cells reads 0 instead of about ``n·s/|X|``) and ``v`` is the mean noise variance of that family's
rows. Everything here depends on public inputs only, so the design is
made before any data is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from planner.convolution import fft_convolve
from planner.noise import RandomLike, discrete_gaussian, discrete_gaussian_variance, discrete_laplace, discrete_laplace_variance
from planner.partition import MIN_PARTITION_DELTA, require_selection_possible
from planner.privacy import Privacy
from planner.strategies.direct import row_norms2, row_norms2_over
from planner.domain import Domain
from planner.workload import Product

KEY_SHARES = tuple(round(0.05 * i, 2) for i in range(1, 20))  # key share of the budget when totals are asked too


def laplace_sum_tail(scale: float, count: int, excess: float) -> float:
    """An upper bound on ``P(S ≥ excess)`` for ``S`` a sum of ``count`` independent discrete Laplace
    draws of ``scale``: Chernoff's bound ``min_λ e^{−λt} M(λ)^count`` with the exact moment generating
    function ``M(λ) = (1 − q)² / ((1 − q e^λ)(1 − q e^{−λ}))``, ``q = e^{−1/scale}``."""
    if excess <= 0:
        return 1.0
    q = math.exp(-1.0 / scale)

    def log_bound(lam: float) -> float:
        return -lam * excess + count * (2 * math.log1p(-q) - math.log1p(-q * math.exp(lam)) - math.log1p(-q * math.exp(-lam)))

    limit = 1.0 / scale  # M is finite for λ < ln(1/q) = 1/scale
    from scipy.optimize import minimize_scalar  # imported when first needed: scipy.optimize costs ~0.3 s

    found = minimize_scalar(log_bound, bounds=(1e-12, limit * (1 - 1e-9)), method="bounded", options={"xatol": 1e-12})
    return float(min(1.0, math.exp(min(log_bound(float(found.x)), 0.0))))


def gaussian_sum_tail(sigma2: float, count: int, excess: float) -> float:
    """An upper bound on ``P(S ≥ excess)`` for ``S`` a sum of ``count`` independent discrete Gaussian
    draws of parameter ``σ²`` (each sub-Gaussian with parameter ``σ²``): ``exp(−t² / (2·count·σ²))``."""
    if excess <= 0:
        return 1.0
    return float(math.exp(-(excess**2) / (2 * count * sigma2)))


EXACT_MAX_CELLS = 32  # sums of up to this many draws get their exact law (convolution); more: Chernoff
EXACT_MAX_SUPPORT = 200_000  # per-draw support beyond which the Chernoff bound is used instead
TRUNCATION = 1e-18  # law mass a per-draw support may leave out (added back to the tail, conservatively)


def draw_law(privacy: Privacy, parameter: float) -> tuple[np.ndarray, float] | None:
    """One draw's probabilities on ``−L..L`` and the mass beyond (an upper bound), or None if too wide."""
    if privacy.is_laplace:
        q = math.exp(-1.0 / parameter)
        half = max(1, math.ceil(math.log(TRUNCATION * (1 + q) / 2) / math.log(q)))
        if half > EXACT_MAX_SUPPORT:
            return None
        support = np.arange(-half, half + 1)
        return (1 - q) / (1 + q) * q ** np.abs(support), 2 * q ** (half + 1) / (1 + q)
    sigma = math.sqrt(parameter)
    half = math.ceil(10 * sigma) + 10  # e^{-50} relative beyond: far below TRUNCATION
    if half > EXACT_MAX_SUPPORT:
        return None
    support = np.arange(-half, half + 1)
    weights = np.exp(-(support.astype(float) ** 2) / (2 * parameter))
    return weights / weights.sum(), TRUNCATION


def sum_tail(privacy: Privacy, parameter: float, count: int, excess: float) -> float:
    """An upper bound on ``P(S ≥ excess)`` for ``S`` the sum of ``count`` independent draws of the per-cell
    noise: its exact law by convolution when small enough (plus the truncated mass and a margin for
    rounding), else Chernoff's bound (:func:`laplace_sum_tail`, :func:`gaussian_sum_tail`)."""
    if excess <= 0:
        return 1.0
    law = draw_law(privacy, parameter) if count <= EXACT_MAX_CELLS else None
    if law is None:
        return laplace_sum_tail(parameter, count, excess) if privacy.is_laplace else gaussian_sum_tail(parameter, count, excess)
    draw, beyond = law
    half = (len(draw) - 1) // 2
    total = draw
    for _ in range(count - 1):
        total = np.clip(fft_convolve(total, draw), 0.0, None)
    first = -half * count
    start = max(0, math.ceil(excess) - first)
    tail = float(total[start:].sum()) if start < len(total) else 0.0
    return min(1.0, tail * (1 + 1e-9) + count * beyond + 1e-15)


@dataclass(frozen=True)
class KeyedRelease:
    """How one statement measures and selects keys: shares, noise, threshold and the δ it spends."""

    privacy: Privacy  # the statement's budget
    key_share: float  # of the budget, for the per-key cells (1: no totals)
    key_privacy: Privacy
    totals_privacy: Privacy | None
    cells: int  # |X|: cells per key
    sensitivity: int  # c = min(m, k·r): rows one unit adds to the per-key cells
    max_groups: int  # k
    rows_per_key: int  # r
    threshold: int  # a key is released when its noisy total is at least this
    delta: float  # δ the selection spends (≤ what was allowed)
    objective: float

    @property
    def noise_parameter(self) -> float:
        """The per-cell noise: discrete Laplace scale (ε-DP) or discrete Gaussian σ² (zCDP)."""
        return noise_parameter(self.key_privacy, self.sensitivity)

    @property
    def cell_variance(self) -> float:
        return cell_variance(self.key_privacy, self.sensitivity)

    def release(self, counts: np.ndarray, rng: RandomLike = None, noise: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Measure every present key's cells and select the keys (module doc): ``counts`` holds one row of
        ``cells`` integer counts per key (any number of keys, none included). Returns the noisy cells
        (keys × cells, integers) and the mask of keys whose noisy total reaches the threshold. ``rng`` and
        ``noise=False`` (exact cells) are for tests; by default the noise comes from the OS CSPRNG."""
        exact = np.asarray(counts, dtype=np.int64).reshape(-1, self.cells)
        drawn = np.zeros(exact.shape, dtype=np.int64)
        if noise and exact.size:
            draw = discrete_laplace if self.key_privacy.is_laplace else discrete_gaussian
            drawn = np.asarray(draw(self.noise_parameter, size=exact.shape, rng=rng), dtype=np.int64).reshape(exact.shape)
        noisy = exact + drawn
        return noisy, noisy.sum(axis=1) >= self.threshold

    def answer_variances(self, product: Product, attributes: tuple[str, ...]) -> np.ndarray:
        """The noise variance of each row of a per-key ``product`` answered from the released noisy cells
        (sums of independent cells over ``attributes``, the key's and the other columns)."""
        return self.cell_variance * row_norms2_over(product, attributes)

    def keep_probability(self, rows: np.ndarray) -> np.ndarray:
        """Approximate ``π(n)``: a key with ``n`` rows is released (normal approximation of the noisy total)."""
        return keep_probability(rows, self.threshold, self.cells * self.cell_variance)

    def describe(self) -> str:
        share = f"{self.key_share:.0%} of the statement's budget" if self.totals_privacy is not None else "the whole budget"
        totals = f"; the queries over all keys at {self.totals_privacy}" if self.totals_privacy is not None else ""
        return (
            f"every key's {self.cells} cell(s) measured with {share} ({self.key_privacy}, noise variance "
            f"{self.cell_variance:.4g} per cell); a key is released when its noisy total reaches {self.threshold} "
            f"(δ = {self.delta:.3g} for at most {self.max_groups} key(s) per unit and {self.rows_per_key} row(s) per key){totals}"
        )


def noise_parameter(privacy: Privacy, sensitivity: int) -> float:
    if privacy.is_laplace:
        return sensitivity / float(privacy.epsilon)
    return sensitivity**2 / (2 * float(privacy.rho))


def cell_variance(privacy: Privacy, sensitivity: int) -> float:
    parameter = noise_parameter(privacy, sensitivity)
    return float(discrete_laplace_variance(parameter) if privacy.is_laplace else discrete_gaussian_variance(parameter))


def keep_probability(rows: np.ndarray, threshold: int, total_variance: float) -> np.ndarray:
    normal = NormalDist(0.0, math.sqrt(total_variance))
    return np.array([1.0 - normal.cdf(threshold - 0.5 - float(n)) for n in np.atleast_1d(rows)])


def threshold_for(privacy: Privacy, sensitivity: int, cells: int, max_groups: int, rows_per_key: int, delta: float) -> tuple[int, float]:
    """The least integer threshold whose selection δ is at most ``delta``, and that δ."""
    parameter = noise_parameter(privacy, sensitivity)
    spread = math.sqrt(cells * cell_variance(privacy, sensitivity))

    def spent(threshold: int) -> float:
        return max_groups * sum_tail(privacy, parameter, cells, threshold - rows_per_key)

    if delta / max_groups < MIN_PARTITION_DELTA:  # below the margin sum_tail keeps for rounding: unreachable
        raise ValueError(f"delta per partition must be at least {MIN_PARTITION_DELTA:g}, got {delta / max_groups:.3g}")
    low, high = rows_per_key, rows_per_key + max(1, math.ceil(spread))
    while spent(high) > delta:
        if high > 1 << 62:
            raise ValueError("no threshold keeps the selection's delta that small: use a larger delta or budget")
        low, high = high, high * 2
    while high - low > 1:  # the tail bound decreases in the threshold: bisect on integers
        middle = (low + high) // 2
        if spent(middle) > delta:
            low = middle
        else:
            high = middle
    return high, spent(high)


def mean_norm2(product: Product, domain: Domain) -> float:
    """Mean squared norm of the product's rows as queries over the cells of ``domain`` (an attribute it
    sums out multiplies every norm by its size): 1 for a cell, ``|X|`` for a key's total."""
    spread = math.prod(domain.size_of(a) for a in domain.attributes if a not in product.attributes)
    return spread * math.prod(float(np.mean(row_norms2(f.block))) for f in product.factors)


def design(
    privacy: Privacy,
    delta: float,
    max_groups: int,
    rows_per_key: int,
    sensitivity: int,
    others: Domain,
    per_key: tuple[Product, ...],
    totals_error: object,
) -> KeyedRelease:
    """The split with the least objective (module doc). ``others``: the attributes ``X`` of a key's cells;
    ``per_key``: the per-key products over ``X`` (the key's column removed), each a query family weighted
    by its weight and the mean squared norm of its rows; ``totals_error(privacy)``: the weighted
    mean-variance sum of the queries over all keys under that privacy (None when the statement asks none)."""
    per_key_families = tuple((p.weight, mean_norm2(p, others)) for p in per_key)
    cells = others.size
    require_selection_possible(delta)
    if delta / max_groups < MIN_PARTITION_DELTA:
        raise ValueError(
            f"delta per partition (delta / max_groups = {delta / max_groups:.3g}) must be 0 or at least "
            f"{MIN_PARTITION_DELTA:g}: use a larger delta for partition selection"
        )
    total = float(privacy.epsilon if privacy.is_laplace else privacy.rho)
    shares = (1.0,) if totals_error is None else KEY_SHARES
    best: KeyedRelease | None = None
    for share in shares:
        key_privacy = Privacy.laplace(total * share) if privacy.is_laplace else Privacy.zcdp(total * share)
        totals_privacy = None if share == 1.0 else (Privacy.laplace(total * (1 - share)) if privacy.is_laplace else Privacy.zcdp(total * (1 - share)))
        threshold, spent = threshold_for(key_privacy, sensitivity, cells, max_groups, rows_per_key, delta)
        variance = cell_variance(key_privacy, sensitivity)
        rows = np.arange(1, max(2, threshold + 12 * math.ceil(math.sqrt(cells * variance))))
        keep = keep_probability(rows, threshold, cells * variance)
        objective = sum(
            weight**2 * float(np.max(keep * variance * norm + (1 - keep) * (rows * norm / cells) ** 2)) for weight, norm in per_key_families
        )
        if totals_privacy is not None:
            objective += float(totals_error(totals_privacy))  # type: ignore[operator]
        candidate = KeyedRelease(privacy, share, key_privacy, totals_privacy, cells, sensitivity, max_groups, rows_per_key, threshold, spent, objective)
        if best is None or candidate.objective < best.objective:
            best = candidate
    assert best is not None
    return best
