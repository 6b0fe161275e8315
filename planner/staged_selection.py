"""Selecting the keys of several columns without a public domain in stages, inside one statement.

``GROUP BY a, b`` with neither column's domain declared asks for the cells of pairs whose keys are private.
Selecting the pairs jointly (one threshold on each pair's noisy count, :mod:`planner.keyed_release`) releases
only pairs that hold many rows on their own. The staged design releases far more when the columns' keys are
larger than their pairs — as a column's key holds the rows of all its pairs:

1. **First stage** — at a share ``f`` of the statement's budget (ε, or ρ under zCDP) and half its δ: each of
   the ``n`` columns' keys is selected from its own noisy total (one cell per key, sensitivity
   ``c = min(m, k·r)`` rows: a unit keeps at most ``k`` key tuples, ``r`` rows per tuple, ``m`` rows in all,
   so it adds at most ``c`` rows to one key of one column and at most ``k`` keys), each column at ``f/n`` of
   the budget and ``δ/(2n)``, by the thresholded release (the released totals are not shown: they decide).
2. **Second stage** — at the rest of the budget and the rest of δ: the column whose released keys hold the
   fewest rows by their noisy totals (the first column on a tie) is *selected* again, by the one-column
   thresholded design over the other columns' released keys, now public domains: each of its keys has one
   cell per combination of their released keys (and their remainders) and of the declared attributes, and is
   released with all those cells when its noisy total reaches the threshold for that many cells. Queries that
   sum over the selected column (a CUBE's subtotals over the others, the grand total) are measured on the whole
   table over the public keys, at a share of the second stage's budget (:mod:`planner.keyed_release`). When a
   column other than the selected one released no key in the first stage (little data for the budget) and
   every query groups by all the columns or by none, the second stage selects the key tuples jointly instead,
   at the same budget and δ.

Which column is selected in the second stage, and so the number of cells ``|X|`` of its keys, is
post-processing of the first stage's release; the second stage's threshold is computed for that ``|X|`` after
the first stage (:meth:`StagedSelection.second`), at the δ reserved for it — the threshold grows with
``|X|``, and the design checks before anything is read that it exists at the largest ``|X|`` a statement may
read (``max_cells``).

**Privacy.** Sequential (adaptive) composition: the first stage is ``n`` thresholded releases of ``f/n`` of the
budget and ``δ/(2n)`` each; the second, for every first-stage outcome, a thresholded release at ``1 − f`` over
public domains with its δ at most ``δ/2``. The statement costs the budget and at most δ, charged once as the
sum of the stages' parts (:attr:`StagedSelection.delta`, the second stage's reserved δ counted in full).

**The split.** The first stage only decides which keys are public: its share is small (``FIRST_SHARE``), enough
for a column whose keys are few and large (a category-like column) to release them, and its δ is half the
statement's (thresholds grow with ``log(1/δ)`` only). The design depends on public inputs only (the budget, δ,
the contribution bounds, the number of columns and the largest number of cells), so it is made before any
data is read.

**Stages that select only** (:func:`split`). A statement whose released values are not the stages' noisy counts —
SUM, AVG, VARIANCE, STDDEV, whose moment cells weigh up to ``R^p`` per row, beyond the stages' per-row bound — runs
the stages at a share ``f`` of its budget to select keys only, and measures its cells over the product of the
released key sets with the rest, ``1 − f``. The second stage then thresholds each key's total alone (one cell at
the whole second-stage budget: its cells are measured later, so a key need not carry their noise), a lower
threshold than for ``|X|`` cells. ``f`` is chosen on the grid of :data:`planner.selection_split.SELECTION_FRACTIONS`
by the one-column split's objective (:mod:`planner.selection_split`), ``max_n π_f(n)·V_f + (1 − π_f(n))·n²``, with
``π_f`` the second stage's probability of releasing a key of ``n`` rows and ``V_f`` the noise variance of one count
at ``1 − f``: the second stage decides most keys, and the first stage's share within ``f`` stays ``FIRST_SHARE``
(which column has few large keys is private). One column whose keys are selected over others' released keys has
no first stage: its keys are released by that one threshold at the whole of ``f`` and δ. Privacy: the stages are
``(fε, δ)`` as above, the measurement ``(1 − f)ε`` over public key sets (a function of the stages' release),
composed sequentially: ``(ε, δ)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from planner.keyed_release import KEY_SHARES, KeyedRelease, threshold_for
from planner.partition import MIN_PARTITION_DELTA, require_selection_possible
from planner.privacy import Privacy
from planner.selection_split import SELECTION_FRACTIONS, count_variance

FIRST_SHARE = 0.1  # of the statement's ε (ρ) for the first stage, split evenly over the columns
FIRST_DELTA_SHARE = 0.5  # of the statement's δ for the first stage, split evenly over the columns


@dataclass(frozen=True)
class StagedSelection:
    """The two stages of one statement (module doc): the first stage's release per column, and the second
    stage's budget and δ, designed for its number of cells once the first stage has released."""

    privacy: Privacy  # the statement's budget
    delta: float  # the δ the statement is charged: the first stage's spent, the second's reserved
    first: tuple[KeyedRelease, ...]  # one per column, in the statement's order: one cell per key
    second_privacy: Privacy
    second_delta: float  # reserved for the second stage
    max_groups: int  # k
    sensitivity: int  # c = min(m, k·r)
    max_cells: int  # the most cells per key the second stage may have

    @property
    def share(self) -> float:
        """The first stage's share of the budget."""
        return FIRST_SHARE

    def second(self, cells: int) -> KeyedRelease:
        """The second stage's thresholded release for keys of ``cells`` cells (``1 ≤ cells ≤ max_cells``): total,
        as the design checked the largest."""
        cells = min(max(cells, 1), self.max_cells)
        return _thresholded(self.second_privacy, self.second_delta, cells, self.max_groups, self.sensitivity, self.sensitivity)

    def describe(self) -> str:
        first = self.first[0]
        return (
            f"stage 1: each of the {len(self.first)} columns' keys selected from its noisy totals at {first.key_privacy} "
            f"(threshold {first.threshold}, δ ≤ {first.delta:.3g} each); stage 2: the column whose released keys hold the "
            f"fewest rows is selected again over the others' released keys at {self.second_privacy} and δ ≤ "
            f"{self.second_delta:.3g}, each of its keys with all its cells"
        )


@lru_cache(maxsize=256)
def _thresholded(privacy: Privacy, delta: float, cells: int, max_groups: int, sensitivity: int, rows_per_key: int) -> KeyedRelease:
    """The thresholded release of keys of ``cells`` cells at the whole of ``privacy``: its least threshold within ``delta``."""
    threshold, spent = threshold_for(privacy, sensitivity, cells, max_groups, rows_per_key, delta)
    return KeyedRelease(privacy, 1.0, privacy, None, cells, sensitivity, max_groups, rows_per_key, threshold, spent, 0.0)


@lru_cache(maxsize=64)
def design(privacy: Privacy, delta: float, columns: int, max_groups: int, sensitivity: int, max_cells: int) -> StagedSelection:
    """The staged design of a statement selecting the keys of ``columns`` columns (module doc), or ValueError
    when δ is too small to split (each column's first stage needs ``δ/(2n)/k ≥`` the least partition δ). A unit
    keeps at most ``max_groups`` key tuples and ``sensitivity`` rows under one key of one column. The second
    stage's threshold is checked to exist for ``max_cells`` cells at the least key share a statement with totals
    gives its keys (every other is lower)."""
    require_selection_possible(delta)
    first_delta = delta * FIRST_DELTA_SHARE / columns
    second_delta = delta - first_delta * columns
    if min(first_delta, second_delta) / max_groups < MIN_PARTITION_DELTA:
        raise ValueError(f"delta {delta:.3g} is too small to split over {columns} columns' selections")
    first = _thresholded(privacy.scaled(FIRST_SHARE / columns), first_delta, 1, max_groups, sensitivity, sensitivity)
    second_privacy = privacy.scaled(1 - FIRST_SHARE)
    _thresholded(second_privacy.scaled(KEY_SHARES[0]), second_delta, max_cells, max_groups, sensitivity, sensitivity)  # the hardest exists
    return StagedSelection(
        privacy, first.delta * columns + second_delta, (first,) * columns, second_privacy, second_delta, max_groups, sensitivity, max_cells
    )


@dataclass(frozen=True)
class StagedSplit:
    """Keys selected only, at ``fraction`` of a statement's budget — several columns in stages, or one column over
    others' released keys by one threshold on its keys' totals — and the measurement over the released keys at the
    rest (module doc, "Stages that select only")."""

    privacy: Privacy  # the statement's budget: what it is charged, with :attr:`delta`
    stages: StagedSelection | None  # several columns: the stages at ``fraction`` of it; None: one column, ``second`` alone
    second: KeyedRelease  # the release that decides most keys: a key released when its noisy total (one cell) reaches the threshold
    fraction: float
    count_privacy: Privacy  # the rest: the measurement over the released keys
    count_variance: float  # noise variance of one count measured alone at ``count_privacy`` (V in the objective)
    objective: float  # max_n π(n)·V + (1 − π(n))·n² of this split

    @property
    def selection_privacy(self) -> Privacy:
        """What selecting the keys spends (``fraction`` of the budget)."""
        return self.stages.privacy if self.stages is not None else self.second.privacy

    @property
    def delta(self) -> float:
        """The δ the statement is charged: the stages' (the second stage's reserved δ in full), or the one threshold's."""
        return self.stages.delta if self.stages is not None else self.second.delta

    def describe(self) -> str:
        how = "selecting keys in stages" if self.stages is not None else "selecting keys by their noisy totals"
        return (
            f"{self.fraction:.0%} of the statement's budget to {how}, the cells measured over the released keys "
            f"under {self.count_privacy}; per-count noise variance {self.count_variance:.4g}; worst expected squared error of one key "
            f"(dropped keys count as 0) {self.objective:.4g}, the least over the candidate splits"
        )


def worst_key_error(release: KeyedRelease, variance: float) -> float:
    """``max over n ≥ 1 of π(n)·V + (1 − π(n))·n²`` for a key of ``n`` rows released by ``release`` (its normal
    approximation, :meth:`KeyedRelease.keep_probability`), over ``n`` up to 12 deviations above the threshold."""
    from scipy.special import ndtr  # imported when first needed: scipy.special costs ~0.15 s

    spread = math.sqrt(release.cells * release.cell_variance)
    rows = np.arange(1, release.threshold + math.ceil(12 * spread) + 2, dtype=float)
    keep = ndtr((rows - (release.threshold - 0.5)) / spread)
    return float(np.max(keep * variance + (1 - keep) * rows**2))


@lru_cache(maxsize=64)
def split(privacy: Privacy, delta: float, columns: int, max_groups: int, sensitivity: int, contributions: int) -> StagedSplit:
    """The share of ``privacy`` that selecting keys spends with the least :func:`worst_key_error` (module doc), the rest
    measuring counts of L1 sensitivity ``contributions`` (in count units). ``columns``: how many columns' keys are
    selected — several: in stages; one (the others' keys released earlier, public): by one threshold on its keys'
    totals, at most ``sensitivity`` rows of a unit under one key and ``max_groups`` new keys, within ``delta``.
    ValueError when δ is too small."""
    require_selection_possible(delta)
    budget = float(privacy.epsilon if privacy.is_laplace else privacy.rho)
    best: StagedSplit | None = None
    for fraction in SELECTION_FRACTIONS:
        share = privacy.scaled(fraction)
        if columns > 1:
            stages: StagedSelection | None = design(share, delta, columns, max_groups, sensitivity, 1)
            second = stages.second(1)  # type: ignore[union-attr]
        else:
            stages, second = None, _thresholded(share, delta, 1, max_groups, sensitivity, sensitivity)
        spent = float(share.epsilon if privacy.is_laplace else share.rho)
        rest = Privacy.laplace(budget - spent) if privacy.is_laplace else Privacy.zcdp(budget - spent)
        variance = count_variance(rest, contributions)
        candidate = StagedSplit(privacy, stages, second, fraction, rest, variance, worst_key_error(second, variance))
        if best is None or candidate.objective < best.objective:
            best = candidate
    assert best is not None
    return best
