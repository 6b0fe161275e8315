"""A private upper clip for a bounded column's values: where SUM/AVG/VARIANCE clamp when the declared
bounds are loose (``clip: auto``).

The column's values are read on a public *base grid* of ``base + 1`` points over the declared ``[lo, hi]``
(index ``i`` stands for ``lo + i·(hi − lo)/base``). The candidates are the grid points
``round(base·2^(−j/STEPS_PER_DOUBLING))`` (``j = 0, 1, …``, down to index 1): a geometric grid from ``hi``
towards ``lo``, so a clip is never more than ``2^(1/32) − 1 ≈ 2.2 %`` of its width above the best
candidate. :class:`UpperClip` releases one by the **exponential mechanism** over them:

* the score of candidate ``c`` is ``|G(c) − m| − min(t(c), h)``: ``G(c)`` the rows above ``c``,
  ``m = ROWS_ABOVE`` (the clip that leaves about ``m`` rows above it), ``t(c)`` the rows between the next
  lower candidate and ``c`` and ``h = ROWS_INSIDE`` (a clip just above many rows — a top-coded value, the
  end of the data — beats the empty candidates above it). A row adds one to ``G(c)`` or to ``t(c)`` or to
  neither, so with ``k`` rows per unit every score moves by at most ``k``;
* the base measure is ``∝ (c − lo)^(−PRIOR_POWER)``: a clip twice as wide costs four times the noise
  variance, and nothing in the data tells the candidates far above the largest value apart (they all leave
  0 rows above and hold none), so without it the mechanism would pick among them uniformly. A base measure
  that does not depend on the data changes no privacy: ``P(c) ∝ μ(c)·exp(−ε·score(c)/(2k))`` is ε-DP
  (McSherry and Talwar 2007, "Mechanism design via differential privacy"), and ``ε²/8``-zCDP (Cesar and
  Rogers 2021, "Bounding, concentrating, and truncating: unifying privacy loss composition for data
  analytics");
* it is sampled exactly: a uniform candidate is kept with probability ``exp(−γ)``, ``γ`` the rational
  ``ε(s − s*)/(2k)`` (``ε`` rounded down to ``EPSILON_BITS`` binary places, the score capped ``MAX_EXPONENT``
  scales beyond the base measure's range above the least, which keeps its sensitivity) plus the base
  measure's ``PRIOR_POWER·ln((c − lo)/(c₀ − lo))`` rounded to ``EPSILON_BITS`` binary places (a public choice
  of base measure).

Heavy tails make the clip a trade-off, not a free win: a tail of a few rows far above the rest (PUMS income:
three rows above 500,000 among 10,000) cannot be located at a share of ε, and the clip lands within a
factor of about 1.5 of the best one either way (``benchmarks/aggregates.py``). The bias it leaves — the
clipped rows' excess — enters the error bars as :attr:`UpperClip.rows_above` rows ``RELATIVE_EXCESS`` of a
clip width above it: ``m + 2k/ε`` rows, ``m`` the rows the score aims at plus one *temperature* of the
mechanism — candidates whose scores differ by ``2k/ε`` rows are drawn with probabilities within a factor
``e``, so the mechanism cannot tell a clip with ``m`` rows above it from one with ``m + 2k/ε``, and a clip
drawn below the aimed one leaves about that many rows more. It is an estimate from public quantities
(``m``, ``k``, ``ε``), not a bound — a few rows at the declared upper bound could move an average further —
calibrated on heavy tails: the 95 % intervals of AVG(income) by sex on PUMS with ``[0, 10000000]`` cover the
unclipped truth at 99 % (with ``m`` rows alone, 80 %; ``benchmarks/aggregates.py``), a log-normal tail of
σ = 0.8 at 97 %, one of σ = 1 at only 88 % (``tests/audit/test_audit_clip_intervals.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.noise import RandomLike, _bernoulli_exp, as_source
from planner.privacy import Privacy

STEPS_PER_DOUBLING = 32
ROWS_ABOVE = 3
"""``m``: the clip leaves about this many rows above it."""
ROWS_INSIDE = 100
"""``h``: a candidate earns up to this many rows of score for the rows between it and the next lower one."""
PRIOR_POWER = 4.0
"""The base measure falls as ``(c − lo)^(−4)``."""
CLIP_SHARE = 0.15
"""The share of the statement's budget the clip spends (the rest measures the aggregates)."""
RELATIVE_EXCESS = 0.5
"""For the error bars: a clipped row is taken to lie half a clip width above the clip."""
EPSILON_BITS = 16
MAX_EXPONENT = 64


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
    """The exponential mechanism of the module doc over ``candidates(base)``, spending ``privacy``."""

    base: int
    privacy: Privacy
    contributions: int = 1

    def __post_init__(self) -> None:
        if self.base < 1 or self.contributions < 1:
            raise ValueError("a clip needs a base grid of at least one step and at least one row per unit")
        if math.floor(self._epsilon() * 2**EPSILON_BITS) < 1:
            raise ValueError(f"epsilon {self._epsilon():g} for the clip is below 2^-{EPSILON_BITS}")

    @property
    def candidates(self) -> tuple[int, ...]:
        return candidates(self.base)

    def _epsilon(self) -> float:
        return self.privacy.epsilon if self.privacy.is_laplace else math.sqrt(8.0 * self.privacy.rho)  # type: ignore[return-value, operator]

    def describe(self) -> str:
        budget = f"epsilon {self.privacy.epsilon:.4g}" if self.privacy.is_laplace else f"rho {self.privacy.rho:.4g}"
        return (
            f"exponential mechanism over {len(self.candidates)} clips on a geometric grid ({STEPS_PER_DOUBLING} per doubling of the "
            f"width) at {budget}: the clip with about {ROWS_ABOVE} rows above it, base measure ∝ width^-{PRIOR_POWER:g}"
        )

    def release(self, histogram: np.ndarray, rng: RandomLike = None) -> int:
        """The chosen clip's base-grid index from the rows per base-grid index (``histogram``, length
        ``base + 1``, non-negative integers). Never fails on such counts."""
        counts = np.asarray(histogram, dtype=np.int64).reshape(-1)[: self.base + 1]
        clips = np.array(self.candidates, dtype=np.int64)
        at_most = np.cumsum(counts)
        above = at_most[-1] - at_most[clips]
        below_previous = np.concatenate([[0], at_most[clips[:-1]]])
        inside = at_most[clips] - below_previous  # rows in (previous candidate, c]
        score = np.abs(above - ROWS_ABOVE) - np.minimum(inside, ROWS_INSIDE) + ROWS_INSIDE
        epsilon_numerator = math.floor(self._epsilon() * 2**EPSILON_BITS)
        denominator = 2**EPSILON_BITS * 2 * self.contributions
        prior = np.round(PRIOR_POWER * np.log(clips / clips[0]) * 2**EPSILON_BITS).astype(np.int64)  # over 2^EPSILON_BITS
        reach = MAX_EXPONENT + int(prior[-1]) // 2**EPSILON_BITS + 1  # beyond the base measure's whole range
        cap = -(-reach * denominator // epsilon_numerator)
        data = np.minimum(score - score.min(), cap) * epsilon_numerator  # over ``denominator``
        numerators = data * 2**EPSILON_BITS + prior * denominator
        numerators -= numerators.min()
        total = denominator * 2**EPSILON_BITS
        source = as_source(rng)
        while True:
            proposals = np.asarray(source.integers(len(clips), size=64), dtype=np.int64)
            kept = _bernoulli_exp(numerators[proposals], np.full(64, total, dtype=np.int64), source)
            if kept.any():
                return int(clips[proposals[int(np.argmax(kept))]])

    @property
    def rows_above(self) -> float:
        """The clipped rows the error bars assume: ``m + 2k/ε`` (the module doc), ``ε`` the mechanism's."""
        return ROWS_ABOVE + 2.0 * self.contributions / self._epsilon()

    @property
    def relative_excess(self) -> float:
        """How far above the clip the error bars assume a clipped row lies, in clip widths."""
        return RELATIVE_EXCESS
