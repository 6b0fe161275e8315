"""A private upper clip for a bounded column's values: where SUM/AVG/VARIANCE clamp when the declared
bounds are loose (``clip: auto``, :class:`UpperClip`), or where a column with no declared end clamps
(``bounds: auto``, :class:`MagnitudeClip`: clips of a distance from a public origin, on a geometric grid from
the column type's spacing to ``2^53``).

The column's values are read on a public *base grid* of ``base + 1`` points over the declared ``[lo, hi]``
(index ``i`` stands for ``lo + i·(hi − lo)/base``). The candidates are the grid points
``round(base·2^(−j/STEPS_PER_DOUBLING))`` (``j = 0, 1, …``, down to index 1): a geometric grid from ``hi``
towards ``lo``, so a clip is never more than ``2^(1/32) − 1 ≈ 2.2 %`` of its width above the best
candidate. :class:`UpperClip` releases one by the **exponential mechanism** whose score is the predicted
error of the answers at each clip (widths ``w = c − lo`` below):

* the answers' error at clip ``c`` is about ``L(c) = λ·w + B(c)``: their noise, ``λ`` rows' worth of clip width
  (``slope``: the plan's expected absolute error of the sums, public), plus the clipped rows' excess
  ``B(c) = Σ (x − c)⁺`` — the bias–variance trade-off of Amin, Kulesza, Muñoz Medina and Vassilvitskii
  ("Bounding User Contributions: A Bias-Variance Trade-off in Differential Privacy", ICML 2019);
* ``ln L = ln w + ln(λ + B/w) ≈ ln w + B/(λ·w)`` while the bias is small beside the noise; with each row's excess
  counted up to ``w/REACH``, ``B/w`` becomes ``S(c)/REACH``, ``S(c) = Σ min(REACH·(x − c)⁺/w, 1)`` — the clipped rows,
  each weighed by its excess up to a twentieth of the width. The law ``P(c) ∝ L(c)^(−K)`` is then
  ``P(c) ∝ w^(−K)·exp(−K·S(c)/(REACH·λ))``: the base measure ``∝ w^(−K)`` is the noise term, and ``K = ε·λ·REACH/k``
  makes the data term the exponential mechanism's ``exp(−ε·S(c)/k)``;
* adding a row raises every ``S(c)`` by at most one (``k`` per unit) and lowers none: for such a *monotone*
  score the mechanism needs no factor 2 — the scores and the normaliser move the same way — so
  ``exp(−ε·S/k)`` is ε-DP (McSherry and Talwar 2007, "Mechanism design via differential privacy"), and, its
  log-ratios over the outputs spanning at most ε (ε-bounded range, Durfee and Rogers 2019, "Practical
  differentially private top-k selection with pay-what-you-get composition"), ``ε²/8``-zCDP (Cesar and Rogers
  2021, "Bounding, concentrating, and truncating: unifying privacy loss composition for data analytics");
  a base measure that does not depend on the data changes no privacy;
* why not the predicted error itself as the score: one row moves ``L(c) − L(c′)`` by up to ``|c − c′|``, so in
  units that bound its sensitivity the good and the poor clips of a heavy tail differ by a row or two, where
  ``S`` counts every clipped row (``benchmarks/clip_scores.py`` puts the families side by side);
* it is sampled exactly: a uniform candidate is kept with probability ``exp(−γ)``, ``γ`` the rational
  ``ε·S/k`` (``ε`` rounded down and ``S`` floored to ``EPSILON_BITS`` binary places — the floor keeps the score
  monotone and its steps within ``k`` — and ``S`` capped at a public level ``MAX_EXPONENT`` nats beyond the
  base measure's range: the widest candidate always scores 0) plus ``K·ln(w/w₀)`` rounded to ``EPSILON_BITS``
  binary places (a public choice of base measure).

:class:`MagnitudeClip` scores ``|G(c) − m| − min(t(c), h)``: ``G(c)`` the rows beyond ``c``, ``m = ROWS_ABOVE``,
``t(c)`` the rows between the next lower candidate and ``c``, ``h = ROWS_INSIDE`` (a clip just above many rows — a
top-coded value, the end of the data — beats the empty candidates beyond it); a row moves ``G`` or ``t`` by one, not
monotonely, so ``P(c) ∝ c^(−2)·exp(−ε·score(c)/(2k))``.

Heavy tails make the clip a trade-off, not a free win: a tail of a few rows far above the rest (PUMS income:
three rows above 500,000 among 10,000) cannot be located at a share of ε (``benchmarks/aggregates.py``).
The bias a clip leaves enters the error bars as :attr:`UpperClip.rows_above` rows ``RELATIVE_EXCESS`` of a
clip width above it: ``m + k/ε`` rows, one *temperature* of the mechanism above ``m`` — candidates whose scores
differ by ``k/ε`` rows are drawn with probabilities within a factor ``e``, so a clip drawn below the best leaves
about that many rows more (``m + 2k/ε`` for :class:`MagnitudeClip`, whose temperature is ``2k/ε``). It is an
estimate from public quantities (``m``, ``k``, ``ε``), not a bound — a few rows at the declared upper bound could
move an average further — calibrated on heavy tails (``tests/audit/test_audit_clip_intervals.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.noise import RandomLike, _bernoulli_exp, as_source
from planner.privacy import Privacy

STEPS_PER_DOUBLING = 32
ROWS_ABOVE = 3
"""``m``: :class:`MagnitudeClip` leaves about this many rows beyond its clip; the error bars' least clipped rows."""
ROWS_INSIDE = 100
"""``h``: a candidate earns up to this many rows of score for the rows between it and the next lower one."""
MAGNITUDE_PRIOR_POWER = 2.0
"""``bounds: auto``: the base measure falls as ``c^(−2)`` (its pull spans up to 85 doublings: see :class:`MagnitudeClip`)."""
CLIP_SHARE = 0.15
"""``bounds: auto``: the share of the statement's budget its clips spend (the rest measures the aggregates)."""
UPPER_CLIP_SHARE = 0.10
"""``clip: auto``: the share of the statement's budget :class:`UpperClip` spends."""
REACH = 20
""":class:`UpperClip` weighs a clipped row by its excess up to ``1/REACH`` of the clip's width."""
RELATIVE_EXCESS = 0.5
"""For the error bars: a clipped row is taken to lie half a clip width above the clip."""
EPSILON_BITS = 16
MAX_EXPONENT = 64
MAX_POWER = 4096.0
"""The steepest base measure :class:`UpperClip` uses (it keeps the integers of the exact sampler small)."""


def candidates(base: int) -> tuple[int, ...]:
    """The base-grid indices of the clips considered, ascending (the module doc's geometric grid)."""
    found = {base}
    step = 1
    while True:
        index = round(base * 2.0 ** (-step / STEPS_PER_DOUBLING))
        if index < 1:
            break
        found.add(index)
        step += 1
    return tuple(sorted(found))


@dataclass(frozen=True)
class UpperClip:
    """``clip: auto``: the exponential mechanism of the module doc over ``candidates(base)`` whose score is the
    predicted error of the answers at each clip, spending ``privacy``; ``slope`` is ``λ``, the noise of the
    measurement that follows in rows of clip width (public: from its plan)."""

    base: int
    privacy: Privacy
    slope: float
    contributions: int = 1

    def __post_init__(self) -> None:
        if self.base < 1 or self.contributions < 1:
            raise ValueError("a clip needs a base grid of at least one step and at least one row per unit")
        if not (math.isfinite(self.slope) and self.slope > 0):
            raise ValueError(f"the noise slope must be a positive number, got {self.slope!r}")
        if math.floor(self._epsilon() * 2**EPSILON_BITS) < 1:
            raise ValueError(f"epsilon {self._epsilon():g} for the clip is below 2^-{EPSILON_BITS}")

    @property
    def candidates(self) -> tuple[int, ...]:
        return candidates(self.base)

    def _epsilon(self) -> float:
        return _epsilon(self.privacy)

    @property
    def power(self) -> float:
        """``K = ε·λ·REACH/k``: the base measure falls as ``c^(−K)``, the noise term of the predicted error (module doc)."""
        return min(self._epsilon() * self.slope * REACH / self.contributions, MAX_POWER)

    def describe(self) -> str:
        return (
            f"exponential mechanism over {len(self.candidates)} clips on a geometric grid ({STEPS_PER_DOUBLING} per doubling of the "
            f"width) at {_budget(self.privacy)}, scored by the predicted error of the answers: their noise ({self.slope:.3g} rows of "
            f"clip width) and the clipped rows' excess (each up to 1/{REACH} of the width), base measure ∝ width^-{self.power:.3g}"
        )

    def release(self, histogram: np.ndarray, rng: RandomLike = None) -> int:
        """The chosen clip's base-grid index from the rows per base-grid index (``histogram``, length
        ``base + 1``, non-negative integers). Never fails on such counts."""
        clips = np.array(self.candidates, dtype=np.int64)
        return int(clips[_draw(self._numerators(histogram), rng)])

    def most_likely(self, histogram: np.ndarray) -> int:
        """The clip the mechanism draws most often (what tests with the noise off read), a base-grid index."""
        return int(self.candidates[int(np.argmin(self._numerators(histogram)[0]))])

    def excess_scores(self, histogram: np.ndarray) -> np.ndarray:
        """Per candidate ``c`` (ascending), ``⌊2^EPSILON_BITS·S(c)⌋`` with ``S(c) = Σ_rows min(REACH·(i − c)⁺/c, 1)``
        (``i`` a row's base-grid index): the clipped rows, each weighed by its excess up to 1/REACH of the width.
        Adding a row raises every score by at most ``2^EPSILON_BITS`` and lowers none."""
        counts = np.asarray(histogram, dtype=np.int64).reshape(-1)[: self.base + 1]
        counts = np.concatenate([counts, np.zeros(self.base + 1 - counts.size, dtype=np.int64)])
        rows = np.cumsum(counts)  # rows at or below each index
        moment = np.cumsum(counts * np.arange(self.base + 1, dtype=np.int64))  # Σ index over those rows
        clips = np.array(self.candidates, dtype=np.int64)
        full = np.minimum(-(-clips * (REACH + 1) // REACH), self.base + 1)  # the first index whose excess reaches c/REACH
        below = full - 1
        partial = REACH * ((moment[below] - moment[clips]) - clips * (rows[below] - rows[clips]))
        numerator = (rows[-1] - rows[below]) * clips + partial  # S(c) = numerator / c
        return (numerator // clips) * 2**EPSILON_BITS + (numerator % clips) * 2**EPSILON_BITS // clips

    def _numerators(self, histogram: np.ndarray) -> tuple[np.ndarray, int]:
        """``−log`` of each candidate's unnormalised probability, ``ε·min(S, cap)/k + K·ln(c/c₀)``, as integer
        numerators over the returned denominator (shifted so that the least is 0)."""
        clips = np.array(self.candidates, dtype=np.int64)
        epsilon_numerator = math.floor(self._epsilon() * 2**EPSILON_BITS)
        denominator = 2 ** (2 * EPSILON_BITS) * self.contributions
        prior = np.round(self.power * np.log(clips / clips[0]) * 2**EPSILON_BITS).astype(np.int64)  # over 2^EPSILON_BITS
        span = MAX_EXPONENT + int(prior[-1]) // 2**EPSILON_BITS + 1  # nats beyond the base measure's whole range
        cap = -(-span * denominator // epsilon_numerator)  # a public cap: the widest candidate always scores 0
        numerators = np.minimum(self.excess_scores(histogram), cap) * epsilon_numerator + prior * 2**EPSILON_BITS * self.contributions
        return numerators - numerators.min(), denominator

    @property
    def rows_above(self) -> float:
        """The clipped rows the error bars assume: ``m + k/ε`` (the module doc), ``ε`` the mechanism's."""
        return ROWS_ABOVE + self.contributions / self._epsilon()

    @property
    def relative_excess(self) -> float:
        """How far above the clip the error bars assume a clipped row lies, in clip widths."""
        return RELATIVE_EXCESS


LOWEST_OCTAVE = -32
"""``bounds: auto``: distances from the origin below ``2^LOWEST_OCTAVE`` read as 0 ..."""
OCTAVES = 85
"""... and the magnitude code spans ``OCTAVES`` doublings above it, to ``2^53`` (the largest bound)."""
MANTISSA_BITS = 20
"""Each doubling holds ``2^MANTISSA_BITS`` codes: a value is read to a relative ``2^−20``."""
SUB_BITS = 5  # 2^SUB_BITS = STEPS_PER_DOUBLING bins per doubling for the clip's histogram


def magnitude_bins(codes: np.ndarray) -> np.ndarray:
    """The clip histogram's bin of each magnitude code (:func:`magnitudes`): 0 for code 0, else one of
    ``STEPS_PER_DOUBLING`` equal-width bins of its doubling."""
    codes = np.asarray(codes, dtype=np.int64)
    return np.where(codes <= 0, 0, 1 + ((codes - 1) >> (MANTISSA_BITS - SUB_BITS)))


def magnitudes(codes: np.ndarray) -> np.ndarray:
    """The magnitude a code stands for: code 0 is 0; code ``1 + (e − LOWEST_OCTAVE)·2^M + f`` the middle of
    ``[2^e(1 + f/2^M), 2^e(1 + (f + 1)/2^M))`` (``M = MANTISSA_BITS``)."""
    codes = np.asarray(codes, dtype=np.int64)
    octave, fraction = np.divmod(np.maximum(codes - 1, 0), 1 << MANTISSA_BITS)
    return np.where(codes <= 0, 0.0, np.ldexp(1.0 + (fraction + 0.5) / 2.0**MANTISSA_BITS, (octave + LOWEST_OCTAVE).astype(np.int64)))


def magnitude_edges() -> np.ndarray:
    """The clips :class:`MagnitudeClip` chooses among: bin ``t``'s upper edge (``2^LOWEST_OCTAVE`` for bin 0)."""
    t = np.arange(1, OCTAVES * STEPS_PER_DOUBLING + 1)
    octave, step = np.divmod(t - 1, STEPS_PER_DOUBLING)
    return np.concatenate([[2.0**LOWEST_OCTAVE], np.ldexp(1.0 + (step + 1) / STEPS_PER_DOUBLING, octave + LOWEST_OCTAVE)])


@dataclass(frozen=True)
class MagnitudeClip:
    """``bounds: auto``: the exponential mechanism of the module doc over :func:`magnitude_edges` — clips of a
    distance from a public origin on a geometric grid from ``2^−32`` to ``2^53`` — from the rows per bin of
    their distances (:func:`magnitude_bins`), spending ``privacy``; the base measure ``∝ c^(−MAGNITUDE_PRIOR_POWER)``."""

    privacy: Privacy
    contributions: int = 1
    resolution: float | None = None  # the values' spacing (1: integers): no clip below it is considered

    def __post_init__(self) -> None:
        if self.contributions < 1:
            raise ValueError("a clip needs at least one row per unit")
        if self.resolution is not None and not self.resolution > 0:
            raise ValueError("a resolution is positive")
        if math.floor(_epsilon(self.privacy) * 2**EPSILON_BITS) < 1:
            raise ValueError(f"epsilon {_epsilon(self.privacy):g} for the clip is below 2^-{EPSILON_BITS}")

    def describe(self) -> str:
        return (f"exponential mechanism over {OCTAVES * STEPS_PER_DOUBLING + 1} clips on a geometric grid from 2^{LOWEST_OCTAVE} "
                f"to 2^{LOWEST_OCTAVE + OCTAVES} ({STEPS_PER_DOUBLING} per doubling) at {_budget(self.privacy)}: about {ROWS_ABOVE} rows "
                f"beyond it, base measure ∝ width^-{MAGNITUDE_PRIOR_POWER:g}")

    @property
    def first(self) -> int:
        """The lowest candidate bin: the first of the doubling that holds the resolution (bin 0 without one)."""
        if self.resolution is None:
            return 0
        octave = min(max(math.floor(math.log2(self.resolution)), LOWEST_OCTAVE), LOWEST_OCTAVE + OCTAVES - 1)
        return 1 + (octave - LOWEST_OCTAVE) * STEPS_PER_DOUBLING

    @property
    def rows_per_doubling(self) -> float:
        """The rows beyond a clip that outweigh the base measure's preference for one half as wide
        (``2k·MAGNITUDE_PRIOR_POWER·ln 2/ε``): data whose clip lies ``d`` doublings above the lowest candidate needs more
        than ``d`` times this many rows below it, or the lowest candidates win (docs/math.md)."""
        return 2.0 * self.contributions * MAGNITUDE_PRIOR_POWER * math.log(2.0) / _epsilon(self.privacy)

    def release(self, histogram: np.ndarray, rng: RandomLike = None) -> int:
        """The chosen bin (its upper edge is the clip) from the rows per bin (length ``OCTAVES·32 + 1``). Never fails."""
        return self.first + _draw(self._numerators(histogram), rng)

    def most_likely(self, histogram: np.ndarray) -> int:
        return self.first + int(np.argmin(self._numerators(histogram)[0]))

    def _numerators(self, histogram: np.ndarray) -> tuple[np.ndarray, int]:
        edges = magnitude_edges()
        counts = np.zeros(edges.size, dtype=np.int64)
        given = np.asarray(histogram, dtype=np.int64).reshape(-1)[: edges.size]
        counts[: given.size] = given
        at_most = np.cumsum(counts)[self.first :]
        widths = edges[self.first :] / edges[self.first]
        return _log_weights(at_most, int(at_most[-1]), widths, _epsilon(self.privacy), self.contributions, MAGNITUDE_PRIOR_POWER)

    @property
    def rows_above(self) -> float:
        return ROWS_ABOVE + 2.0 * self.contributions / _epsilon(self.privacy)

    @property
    def relative_excess(self) -> float:
        return RELATIVE_EXCESS


def _epsilon(privacy: Privacy) -> float:
    """The exponential mechanism's ε: the Laplace family's, or ``√(8ρ)`` under zCDP."""
    return privacy.epsilon if privacy.is_laplace else math.sqrt(8.0 * privacy.rho)  # type: ignore[return-value, operator]


def _budget(privacy: Privacy) -> str:
    return f"epsilon {privacy.epsilon:.4g}" if privacy.is_laplace else f"rho {privacy.rho:.4g}"


def _log_weights(
    at_most: np.ndarray, total: int, widths: np.ndarray, epsilon: float, contributions: int, power: float
) -> tuple[np.ndarray, int]:
    """:class:`MagnitudeClip`: per candidate (ascending; ``at_most`` the rows at or below each, ``widths`` its width
    over the first's), ``−log`` of its unnormalised probability (the module doc's score and base measure
    ``∝ width^(−power)``) as integer numerators over the returned denominator, shifted so that the least is 0."""
    above = total - at_most
    inside = at_most - np.concatenate([[0], at_most[:-1]])  # rows in (previous candidate, c]
    score = np.abs(above - ROWS_ABOVE) - np.minimum(inside, ROWS_INSIDE) + ROWS_INSIDE
    epsilon_numerator = math.floor(epsilon * 2**EPSILON_BITS)
    denominator = 2**EPSILON_BITS * 2 * contributions
    prior = np.round(power * np.log(widths) * 2**EPSILON_BITS).astype(np.int64)  # over 2^EPSILON_BITS
    reach = MAX_EXPONENT + int(prior[-1]) // 2**EPSILON_BITS + 1  # beyond the base measure's whole range
    cap = -(-reach * denominator // epsilon_numerator)
    data = np.minimum(score - score.min(), cap) * epsilon_numerator  # over ``denominator``
    numerators = data * 2**EPSILON_BITS + prior * denominator
    return numerators - numerators.min(), denominator * 2**EPSILON_BITS


def _draw(weights: tuple[np.ndarray, int], rng: RandomLike) -> int:
    """A candidate's position drawn exactly with probability ∝ ``exp(−numerator/denominator)`` (``weights``
    from :func:`_log_weights`): a uniform proposal kept with that probability."""
    numerators, total = weights
    source = as_source(rng)
    while True:
        proposals = np.asarray(source.integers(len(numerators), size=64), dtype=np.int64)
        kept = _bernoulli_exp(numerators[proposals], np.full(64, total, dtype=np.int64), source)
        if kept.any():
            return int(proposals[int(np.argmax(kept))])
