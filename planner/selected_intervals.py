"""Error bars for counts released because their key's noisy total reached a threshold (``keyed_release``).

A key is released when the sum of its noisy cells reaches ``τ``, and its cells are released as measured. For
a released key the noise is no longer a plain draw of the noise law: the draws that pushed the total over
``τ`` are favoured. A row ``r`` of the key's cells (a sum over ``m`` of them; the key's total sums all of
them) gets its interval from the law *given the selection*, conditioning on the key's other noisy cells —
released too, and independent of the row's noise: with ``y`` the row's noisy value and ``y′ = T̃ − y`` the
rest of the key's noisy total, the key was released exactly when ``y ≥ t = τ − y′``, so ``y = c + S``
given ``S ≥ t − c``, ``S`` a sum of ``m`` independent draws of the per-cell noise. The confidence set for the
row's true count ``c`` (an integer, at least 0) inverts that truncated law (selective inference: Fithian,
Sun and Taylor, "Optimal inference after model selection"; the other cells are a nuisance statistic
conditioned on): ``c`` is in it when ``P_c(Y ≥ y | Y ≥ t) > α/2`` and ``P_c(Y ≤ y | Y ≥ t) > α/2``. A row
near the threshold gets a set reaching down to 0 (a small count could have produced it); a row far above
gets the central interval of the noise law itself, which covers at least ``1 − α`` also where the normal
approximation ``y ± 1.96·sd`` does not: a discrete Laplace draw of ``sd = 1.84`` lies within ``±3`` only
93.2 % of the time. The law is on the integers, so coverage is at least, not exactly, ``1 − α``. The
released error is ``max(hi − y, y − lo)/z``: ``y ± z·error`` holds the whole set (as a quantile's does).

``S``'s law is exact (convolution of the per-cell law) for rows of up to ``keyed_release.EXACT_MAX_CELLS``
cells, else normal with the summed variance (with a continuity correction).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from statistics import NormalDist

import numpy as np

from planner.convolution import fft_convolve
from planner.domain import Domain
from planner.keyed_release import EXACT_MAX_CELLS, KeyedRelease, draw_law
from planner.workload import Product, marginal_for

Tail = Callable[[np.ndarray], np.ndarray]  # integer s → P(S ≥ s)
RELIABLE = 1e-12  # a selection probability below this is not divided by (the laws are accurate to ~1e-16)
REACH_MASS = 1e-9  # the window of counts examined holds all but this much of the noise law
MAX_SUPPORT = 1 << 20  # points of an exact law (beyond: the normal law of the sum)


def selected_errors(release: KeyedRelease, values: np.ndarray, cells: np.ndarray, key_totals: np.ndarray, level: float = 0.95) -> np.ndarray:
    """Per row of a key ``release`` let through (its noisy ``values``, the number of the key's ``cells`` it
    sums, and the key's noisy total), the error whose ``± z·error`` band (``z`` of two-sided ``level``) holds
    the row's confidence set given that the key was released (module doc); 0 for a row over no cell."""
    values = np.rint(np.asarray(values, dtype=float))
    cells = np.rint(np.asarray(cells, dtype=float)).astype(np.int64)
    rest = np.rint(np.asarray(key_totals, dtype=float)) - values
    gaps = np.maximum(values - (release.threshold - rest), 0)  # y − t
    alpha = 1.0 - level
    z = NormalDist().inv_cdf(0.5 + level / 2)
    errors = np.zeros(len(values))
    for count, (tail, reach) in _sum_tails(release, [int(c) for c in np.unique(cells[cells > 0])]):
        rows = np.flatnonzero(cells == count)
        clipped = np.minimum(gaps[rows], 2 * reach + 2).astype(np.int64)  # farther above t: no truncation in the window
        for gap in np.unique(clipped):
            at = rows[clipped == gap]
            low, high = _offsets(tail, int(gap), reach, alpha)
            y = values[at]
            lows = np.zeros(len(at)) if low is None else np.maximum(y + low, 0.0)
            highs = np.maximum(y + high, 0.0)
            errors[at] = np.maximum(highs - y, y - lows) / z
    return errors


def _offsets(tail: Tail, gap: int, reach: int, alpha: float) -> tuple[int | None, int]:
    """The confidence set of ``c − y`` for a row ``gap = y − t`` above its truncation point, over the window
    ``|c − y| ≤ reach + 1``: ``(low, high)``, low None when the set reaches below the window (then every
    count down to 0 is kept: conservative) — or when no count passes both tests (``y`` at the truncation point
    of a law so wide that it lies in the lower tail for every ``c``): then the one-sided upper bound. The noise law is log-concave, so ``Y | Y ≥ t`` moves down with
    ``c``: ``P(Y ≥ y | ·)`` falls and ``P(Y ≤ y | ·)`` rises as ``c`` does — the set is an interval, and where
    the selection probability is too small to divide by, a ``c`` is kept exactly when the lowest reliable
    one passes the upper test."""
    offsets = np.arange(-reach - 1, reach + 2)
    kept_mass = tail(-gap - offsets)  # P(Y ≥ t) for c = y + offset: increasing in the offset
    reliable = kept_mass > RELIABLE
    with np.errstate(divide="ignore", invalid="ignore"):
        above = tail(-offsets) / kept_mass  # P(Y ≥ y | Y ≥ t)
        below = (kept_mass - tail(1 - offsets)) / kept_mass  # P(t ≤ Y ≤ y | Y ≥ t)
    keep = reliable & (above > alpha / 2) & (below > alpha / 2)
    first = int(np.argmax(reliable))
    keep[:first] = above[first] > alpha / 2
    if not keep.any():  # at the truncation point of a wide law even the smallest c puts y in the lower tail
        upper = offsets[reliable & (below > alpha)]  # then: an upper bound alone (every count below it kept)
        return None, int(upper.max()) if upper.size else reach + 1
    found = offsets[keep]
    return (None if keep[0] else int(found.min())), int(found.max())


def _sum_tails(release: KeyedRelease, counts: list[int]) -> Iterator[tuple[int, tuple[Tail, int]]]:
    """Per count (ascending), ``s ↦ P(S ≥ s)`` for ``S`` a sum of that many per-cell draws and ``reach``:
    ``P(|S| > reach)`` is below :data:`REACH_MASS`. The exact law (convolutions, each count's built on the
    previous one's) when small enough, else the normal one."""
    draw = draw_law(release.key_privacy, release.noise_parameter)
    total, built = None, 0
    for count in counts:
        if draw is None or count > EXACT_MAX_CELLS or count * len(draw[0]) > MAX_SUPPORT:
            yield count, _normal_tail(math.sqrt(count * release.cell_variance))
            continue
        if total is None:
            total, built = draw[0], 1
        if built < count:
            for _ in range(count - built):
                total = np.clip(fft_convolve(total, draw[0]), 0.0, None)
            built = count
        yield count, _exact_tail(total)


def _exact_tail(law: np.ndarray) -> tuple[Tail, int]:
    """The tail function and reach of a law on ``−half..half``."""
    half = (len(law) - 1) // 2
    tails = np.concatenate([np.cumsum(law[::-1])[::-1], [0.0]])  # tails[i] = P(S ≥ i − half)

    def tail(s: np.ndarray) -> np.ndarray:
        index = np.clip(np.asarray(s, dtype=np.int64) + half, 0, len(tails) - 1)
        return np.where(np.asarray(s) <= -half, 1.0, tails[index])

    return tail, max(int(np.argmax(tails <= REACH_MASS / 2)) - half, 1)


def _normal_tail(sd: float) -> tuple[Tail, int]:
    """``P(N(0, sd²) ≥ s − ½)`` (continuity-corrected, accurate far into the tail) and its reach."""
    from scipy.special import erfc

    def tail(s: np.ndarray) -> np.ndarray:
        return 0.5 * erfc((np.asarray(s, dtype=float) - 0.5) / (sd * math.sqrt(2)))

    return tail, math.ceil(NormalDist().inv_cdf(1 - REACH_MASS / 2) * sd) + 1


def selected_variances(
    release: KeyedRelease, product: Product, domain: Domain, table: np.ndarray, key_axis: int | tuple[int, ...], values: np.ndarray
) -> np.ndarray:
    """Per row of a per-key ``product`` answered from the released noisy cells ``table`` (over ``domain``, the
    key's column on ``key_axis`` — its columns on several axes, for a key that is a tuple of values of jointly
    selected columns; ``values`` its answers), the variance whose normal interval holds the row's
    confidence set given that its key was released (:func:`selected_errors`); rows that are not plain sums of
    a key's cells keep the noise variance (``KeyedRelease.answer_variances``). Every row lies within one key
    (the product is Identity on the key column), so the key's noisy total per row is the row's answer over a
    table holding each key's total in every cell, divided by the row's cell count (its answer over ones)."""
    def answer(cells: np.ndarray) -> np.ndarray:
        return product.unweighted_answer(marginal_for(domain, {domain.attributes: cells}, product.attributes))

    cells = answer(np.ones_like(table))
    axes = (key_axis,) if isinstance(key_axis, int) else key_axis
    totals = answer(np.broadcast_to(table.sum(axis=tuple(a for a in range(table.ndim) if a not in axes), keepdims=True), table.shape))
    noise = release.answer_variances(product, domain.attributes)
    plain = np.isclose(noise, release.cell_variance * cells)  # 0/1 rows: a sum of cells
    key_totals = np.divide(totals, cells, out=np.zeros_like(totals, dtype=float), where=cells > 0)
    errors = selected_errors(release, values, np.where(plain, cells, 0), key_totals)
    return np.where(plain, errors**2, noise)
