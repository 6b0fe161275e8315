"""Quantiles of one column per group by the exponential-mechanism family, and the choice against a CDF.

A measured CDF per group (``Identity ⊗ Prefix`` in a linear workload) costs what the whole CDF costs,
whatever the number of quantiles read from it; an exponential mechanism spends its budget on one rank.
:func:`choose` prices both from public facts only — the fractions, the number of groups and of cells, the
privacy spec and the CDF's rank variances from its plan — before anything is read, and
:class:`ExponentialQuantiles` releases the chosen mechanism's answers (cell indices) from the exact
histograms, drawing from OS entropy unless a test passes a seed.

**One quantile** ``q`` of a group with histogram ``h`` over cells ``0..K−1``: with ``L(c)`` the rows below
cell ``c`` and ``t(c)`` the rows in it, the candidate ``c`` holds the ranks ``[L, L + t]``; its score is the
distance from the target rank ``qN`` to that block with ``min(q·t/2, c)`` rows cut from its bottom and
``min((1−q)·t/2, c)`` from its top, ``c = TRIM_SCALES · 2kΔ/ε`` (two of the distances over which a
candidate's weight falls by e). Adding or removing a row moves ``L`` or ``t`` by one and the target by
``q``, so every score moves by at most ``Δ = max(q, 1 − q)`` (``k·Δ`` with ``k`` rows per privacy unit).
The whole block (Smith 2011, "Privacy-preserving statistical estimation with optimal convergence rates")
scores a true quantile's cell 0 but its neighbours almost as well when the target lies near the block's
edge; OpenDP's point ``L + q·t`` (``make_quantile_score_candidates``) separates neighbours better but
scores the true cell far off inside a large block of tied rows (Adult's 40 hours: half the rows). The cut
keeps both strengths: on PUMS and Adult medians it beats either (``benchmarks/quantiles.py``).

* Pure ε-DP: **permute-and-flip** (McKenna and Sheldon 2020, "Permute-and-Flip: a new mechanism for
  differentially private selection"): every candidate is kept with probability ``exp(−ε(s − s*)/(2kΔ))``
  (``s*`` the least score, whose candidate is always kept) and the first kept one in a uniformly random
  order is released — equivalently a uniformly random kept one. It is ε-DP and never worse than the
  exponential mechanism in expected score. Each coin is an exact Bernoulli(exp(−γ)) for a rational ``γ``
  (``planner.noise``): ``ε`` is rounded down to ``EPSILON_BITS`` binary places and a score more than
  ``MAX_EXPONENT`` above ``s*`` counts as that much (``min(s, s* + C)`` moves by at most ``kΔ`` too), so
  every test is on integers.
* ρ-zCDP: the **exponential mechanism** at ``ε = √(8ρ)``, which is ρ-zCDP (Cesar and Rogers 2021,
  "Bounding, concentrating, and truncating: unifying privacy loss composition for data analytics"),
  sampled exactly by rejection: a uniform candidate is kept with probability ``exp(−ε(s − s*)/(2kΔ))``.

**Several quantiles of one group**: each at ``1/m`` of the budget (``independent``, sequential
composition), or the **recursive** mechanism of Kaplan, Schnapp and Stemmer (2022, "Differentially
private approximate quantiles"): the middle fraction first, at ``1/⌈log₂(m+1)⌉`` of the budget, then the
rows below its answer ``x`` (cells ``< x``, candidates up to ``x``) and from ``x`` on each answer their
fractions relative to their part, one level at a time; the parts of a level hold disjoint rows, so a level
costs one share (parallel composition). A part's relative fractions are those of the intended split, so
an answer's rank error moves its descendants' targets by that error times their relative fraction.

**Predicted rank error** (mean absolute error in rows, over the fractions): the *dense model* — one row
per rank, every rank its own candidate, no ties — for which a score is the rank error itself. The
candidate ``e`` cells from the target's has the score ``|e| − q/2`` above it and ``|e| − (1−q)/2`` below
(the target at its cell's q-point); at ``β = ε/(2kΔ)`` the exponential mechanism's law is ``∝ e^{−β s_e}``,
summed numerically — permute-and-flip's expected score is never higher, so its prediction is that one; the recursive mechanism adds its
ancestors' errors times the relative fractions (an upper bound). Ties help the CDF path and a single
mechanism alike, but a recursive split inside a block of tied rows moves its descendants' targets by up to
the block (which the model cannot see: the data's ties are private), so that family is compared at
``RECURSIVE_ALLOWANCE`` times its predicted error; many empty cells near the answer hurt the exponential
mechanism, not the CDF. The CDF path's is
``√(2/π) · sd(F(k) − qN)``, the rank standard deviation its plan prices, averaged over cells.

**The choice** (:func:`choose`): the exponential path gives the mechanisms a share of the budget and keeps
at least ``BAND_SHARE`` for the linear plan, which still measures the column's CDF — it supplies the
group's noisy row count (a group released as NULL when it rounds to 0) and the rank band the error bar
inverts, exactly as on the CDF path, so the error bars stay as honest (the band holds the released answer).
The share minimises the predicted total squared error — the other products' expected error from their plan
(scaled to the linear plan's share) plus every quantile's squared rank error — and the path with the lower
total wins.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.noise import RandomLike, RandomSource, _bernoulli_exp, as_source
from planner.privacy import Privacy

FRACTION_BITS = 12
"""A fraction ``q`` is used as ``round(q·2^12)/2^12`` (its sensitivity computed for that value)."""
EPSILON_BITS = 20
"""ε is rounded down to a multiple of 2^-20 for the exact coins (less ε: never less private)."""
MAX_EXPONENT = 64
"""Scores more than this many ``2kΔ/ε`` above the least count as exactly that far (keep probability e^-64)."""
TRIM_SCALES = 2.0
"""A block is cut by at most this many ``2kΔ/ε`` rows at each end (module doc)."""
BAND_SHARE = 0.1
"""Least share of the budget the linear plan keeps on the exponential path (the CDF for N and the band)."""
SHARES = tuple(round(0.05 * i, 2) for i in range(1, 19))  # mechanism shares tried when other products share the plan
RECURSIVE_ALLOWANCE = 2.0
"""The recursive mechanism is compared at twice its predicted error (``ExponentialQuantiles.allowance``)."""
MAX_INDEPENDENT = 4  # most quantiles per group answered by one mechanism each
FAMILIES = ("independent", "recursive")


def _quantized(fraction: float) -> int:
    """``q`` as a multiple of 2^-FRACTION_BITS (the numerator)."""
    return int(round(min(max(float(fraction), 0.0), 1.0) * 2**FRACTION_BITS))


def _sensitivity_units(numerator: int) -> int:
    """``Δ = max(q, 1 − q)`` in the score's units of ``1/(2·2^FRACTION_BITS)`` rows."""
    return 2 * max(numerator, 2**FRACTION_BITS - numerator)


def scores(histograms: np.ndarray, fraction: float, trim: int) -> np.ndarray:
    """Per group (rows) and candidate cell (columns), the score of the module doc in exact integers, in
    units of ``1/(2·2^FRACTION_BITS)`` rows: the distance from ``qN`` to the block ``[L, L + t]`` with
    ``min(qt/2, c)`` cut from its bottom and ``min((1−q)t/2, c)`` from its top, ``c = trim`` in those units."""
    counts = np.asarray(histograms, dtype=np.int64)
    numerator, whole = _quantized(fraction), 2**FRACTION_BITS
    below = np.cumsum(counts, axis=1) - counts
    target = 2 * numerator * counts.sum(axis=1, keepdims=True)
    low = 2 * whole * below + np.minimum(numerator * counts, trim)
    high = 2 * whole * (below + counts) - np.minimum((whole - numerator) * counts, trim)
    return np.maximum(np.maximum(low - target, target - high), 0)


@dataclass(frozen=True)
class ExponentialQuantiles:
    """The quantiles ``fractions`` of one column over ``cells`` cells, per group, by one member of the
    exponential-mechanism family (module doc), spending ``privacy`` in all (groups hold disjoint rows)."""

    fractions: tuple[float, ...]
    cells: int
    privacy: Privacy
    family: str  # "independent" or "recursive"
    contributions: int = 1

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown family {self.family!r}; use one of {FAMILIES}")
        if not self.fractions or any(not 0.0 <= q <= 1.0 for q in self.fractions):
            raise ValueError(f"fractions must lie in [0, 1], got {self.fractions!r}")
        if self.cells < 1 or self.contributions < 1:
            raise ValueError("a mechanism needs at least one cell and one row per unit")
        if self.privacy.is_laplace and math.floor(self._epsilon() * 2**EPSILON_BITS) < 1:
            raise ValueError(f"epsilon {self._epsilon():g} per mechanism is below 2^-{EPSILON_BITS}")

    # -- public facts -------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        kind = "permute-and-flip" if self.privacy.is_laplace else "exponential mechanism"
        if len(self.fractions) == 1:
            return kind
        return f"{kind}, {'one per quantile' if self.family == 'independent' else 'recursive (Kaplan-Schnapp-Stemmer)'}"

    @property
    def levels(self) -> int:
        """Mechanisms a row takes part in: the budget is split this many ways."""
        return len(self.fractions) if self.family == "independent" else max(1, math.ceil(math.log2(len(self.fractions) + 1)))

    def _share(self) -> Privacy:
        return self.privacy.scaled(1.0 / self.levels)

    def _epsilon(self) -> float:
        """The ε each mechanism runs at (pure DP: its share; zCDP: √(8ρ) of its share)."""
        share = self._share()
        return share.epsilon if share.is_laplace else math.sqrt(8.0 * share.rho)  # type: ignore[operator]

    def predicted_rank_errors(self) -> tuple[float, ...]:
        """Per fraction, the expected absolute rank error in rows under the dense model (module doc)."""
        if self.family == "independent":
            return tuple(self._node_error(q) for q in self.fractions)
        errors: dict[int, float] = {}
        for node in _recursion(self.fractions):
            errors[node.index] = self._node_error(node.relative) + (0.0 if node.parent is None else node.factor * errors[node.parent])
        return tuple(errors[i] for i in range(len(self.fractions)))

    def predicted_rank_error(self) -> float:
        errors = self.predicted_rank_errors()
        return float(sum(errors) / len(errors))

    @property
    def allowance(self) -> float:
        """How much worse than predicted the family may do on tied data, where the dense model is optimistic
        for it: the recursive mechanism's splits fall inside blocks of tied rows (module doc)."""
        return RECURSIVE_ALLOWANCE if self.family == "recursive" else 1.0

    def score_rows(self, histograms: np.ndarray, fraction: float) -> np.ndarray:
        """The scores one mechanism of this family gives every cell of each group, in rows (module doc)."""
        numerator = _quantized(fraction)
        return scores(histograms, numerator / 2**FRACTION_BITS, self._trim(numerator)) / (2 * 2**FRACTION_BITS)

    def _trim(self, numerator: int) -> int:
        """``c``: ``TRIM_SCALES`` times the distance ``2kΔ/ε`` at which a candidate's weight falls by e (score units)."""
        return int(TRIM_SCALES * 2 * self.contributions * _sensitivity_units(numerator) / self._epsilon())

    def _node_error(self, fraction: float) -> float:
        beta = round(self._epsilon() / (2 * self.contributions * max(fraction, 1.0 - fraction)), 9)
        fraction = round(fraction, 6)
        return exponential_error(beta, fraction)

    # -- release ------------------------------------------------------------------------------------------
    def release(self, histograms: np.ndarray, rng: RandomLike = None) -> np.ndarray:
        """Per group (rows of ``histograms``: non-negative integer counts over the cells) and fraction, the
        released cell. Never fails on any counts of the right shape; a group without rows gets a uniformly
        random cell (its answer is NULL on the caller's noisy count)."""
        counts = np.asarray(histograms, dtype=np.int64).reshape(-1, self.cells)
        source = as_source(rng)
        if self.family == "independent":
            return np.stack([self._select(counts, q, source) for q in self.fractions], axis=1)
        chosen = np.zeros((len(counts), len(self.fractions)), dtype=np.int64)
        for row, histogram in enumerate(counts):
            chosen[row] = self._recursive(histogram, source)
        return chosen

    def _recursive(self, histogram: np.ndarray, source: RandomSource) -> np.ndarray:
        """One group's answers, node by node: a node's part is its parent's rows below the parent's answer
        (candidates up to that answer) or from it on."""
        answers = np.zeros(len(self.fractions), dtype=np.int64)
        parts: dict[int, tuple[int, int, int]] = {}  # node -> (first candidate, end of its rows, end of its candidates)
        for node in _recursion(self.fractions):
            if node.parent is None:
                first, rows_end, candidates_end = 0, self.cells, self.cells
            else:
                first, rows_end, candidates_end = parts[node.parent]
                split = int(answers[node.parent])
                first, rows_end, candidates_end = (first, split, split + 1) if node.below else (split, rows_end, candidates_end)
            parts[node.index] = (first, rows_end, candidates_end)
            part = np.zeros(candidates_end - first, dtype=np.int64)
            part[: rows_end - first] = histogram[first:rows_end]
            answers[node.index] = first + int(self._select(part[None, :], node.relative, source)[0])
        return answers

    def _select(self, counts: np.ndarray, fraction: float, source: RandomSource) -> np.ndarray:
        """One mechanism per row of ``counts`` at the per-level budget: the chosen cell of each row."""
        numerator = _quantized(fraction)
        epsilon_numerator = math.floor(self._epsilon() * 2**EPSILON_BITS)
        denominator = 2**EPSILON_BITS * 2 * self.contributions * _sensitivity_units(numerator)
        score = scores(counts, numerator / 2**FRACTION_BITS, self._trim(numerator))
        cap = -(-MAX_EXPONENT * denominator // epsilon_numerator)  # C: min(s, s* + C) is as sensitive as s
        excess = np.minimum(score - score.min(axis=1, keepdims=True), cap)
        numerators = excess * epsilon_numerator
        if self.privacy.is_laplace:
            return _permute_and_flip(numerators, denominator, source)
        return _rejection(numerators, denominator, source)


def _permute_and_flip(numerators: np.ndarray, denominator: int, source: RandomSource) -> np.ndarray:
    """Per row, a uniformly random one of the candidates kept by independent Bernoulli(exp(−γ)) coins
    (``γ = numerators/denominator``; the least is 0, so one is always kept)."""
    rows, cells = numerators.shape
    kept = _bernoulli_exp(numerators.ravel(), np.full(numerators.size, denominator, dtype=np.int64), source).reshape(rows, cells)
    counts = kept.sum(axis=1)
    picks = np.asarray(source.integers(counts), dtype=np.int64)
    order = np.cumsum(kept, axis=1) - 1  # the position of each kept candidate among its row's kept ones
    return np.argmax(kept & (order == picks[:, None]), axis=1)


def _rejection(numerators: np.ndarray, denominator: int, source: RandomSource) -> np.ndarray:
    """Per row, a candidate with probability ∝ exp(−γ): uniform proposals kept with probability exp(−γ)."""
    rows, cells = numerators.shape
    chosen = np.full(rows, -1, dtype=np.int64)
    pending = np.arange(rows)
    batch = max(8, min(cells, 4096))
    while pending.size:
        proposals = np.asarray(source.integers(cells, size=(pending.size, batch)), dtype=np.int64)
        gammas = numerators[pending[:, None], proposals]
        kept = _bernoulli_exp(gammas.ravel(), np.full(gammas.size, denominator, dtype=np.int64), source).reshape(gammas.shape)
        done = kept.any(axis=1)
        first = np.argmax(kept, axis=1)
        chosen[pending[done]] = proposals[np.flatnonzero(done), first[done]]
        pending = pending[~done]
    return chosen


@dataclass(frozen=True)
class _Node:
    """A step of the recursive mechanism: the fraction ``index`` answered within its part, at its fraction
    ``relative`` to the part; the part lies below (``below``) or from the answer of ``parent`` on, whose rank
    error moves this node's target by ``factor`` times that error."""

    index: int
    relative: float
    parent: int | None
    below: bool
    factor: float


def _recursion(fractions: Sequence[float]) -> list[_Node]:
    """The recursive mechanism's steps, each after its parent: the middle fraction of a part first."""
    order = sorted(range(len(fractions)), key=lambda i: fractions[i])
    nodes: list[_Node] = []

    def visit(members: list[int], low: float, high: float, parent: int | None, below: bool) -> None:
        if not members:
            return
        middle = members[len(members) // 2]
        relative = (fractions[middle] - low) / (high - low) if high > low else 0.5
        relative = min(max(relative, 0.0), 1.0)
        factor = 0.0 if parent is None else (relative if below else 1.0 - relative)
        nodes.append(_Node(middle, relative, parent, below, factor))
        visit(members[: len(members) // 2], low, fractions[middle], middle, True)
        visit(members[len(members) // 2 + 1 :], fractions[middle], high, middle, False)

    visit(order, 0.0, 1.0, None, True)
    return nodes


def _dense_scores(beta: float, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """The dense model's rank errors ``e`` and scores: one row per cell, the target at its cell's q-point, so
    the cut block ``e`` cells away lies ``|e| − q/2`` above it (``|e| − (1−q)/2`` below; the cut of one row's
    block is never more than ``c``, which is at least half a row at every budget the mechanisms run at)."""
    reach = int(math.ceil(40.0 / beta)) + 1
    errors = np.arange(-reach, reach + 1)
    shift = np.where(errors > 0, fraction / 2, (1 - fraction) / 2)
    return errors, np.where(errors == 0, 0.0, np.abs(errors) - shift)


@functools.lru_cache(maxsize=4096)
def exponential_error(beta: float, fraction: float = 0.5) -> float:
    """E|e| of the exponential mechanism with weights e^(−β·s_e) over the dense model's candidates."""
    errors, score = _dense_scores(beta, fraction)
    weights = np.exp(-beta * score)
    return float((np.abs(errors) * weights).sum() / weights.sum())


@dataclass(frozen=True)
class QuantileColumn:
    """A quantiled column the exponential path could answer: its fractions, cells, groups, and the CDF
    path's rank variances per fraction (``Var(F(k) − qN)`` averaged over groups and cells, from its plan)."""

    name: str
    fractions: tuple[float, ...]
    cells: int
    groups: int
    cdf_rank_variances: tuple[float, ...]

    def cdf_errors(self, scale: float = 1.0) -> tuple[float, ...]:
        """The CDF path's expected absolute rank errors when its plan's variances are multiplied by ``scale``."""
        return tuple(math.sqrt(2.0 / math.pi) * math.sqrt(max(v * scale, 0.0)) for v in self.cdf_rank_variances)


@dataclass(frozen=True)
class QuantileChoice:
    """What :func:`choose` decided: the mechanisms of the columns on the exponential path (empty: the CDF
    path for all), the linear plan's share of the budget, and the predicted errors behind it."""

    mechanisms: dict[str, ExponentialQuantiles]
    linear_share: float
    predicted: dict[str, tuple[float, float]]  # column -> (exponential path, CDF path) mean rank error in rows

    @property
    def exponential(self) -> bool:
        return bool(self.mechanisms)

    def linear_privacy(self, privacy: Privacy) -> Privacy:
        return privacy.scaled(self.linear_share) if self.mechanisms else privacy


def _variance_scale(privacy: Privacy, share: float) -> float:
    """How a plan's variances grow when its budget is ``share`` of ``privacy`` (1/share² for ε, 1/share for ρ)."""
    return 1.0 / share**2 if privacy.is_laplace else 1.0 / share


def design(fractions: Sequence[float], cells: int, privacy: Privacy, contributions: int = 1) -> ExponentialQuantiles:
    """The family member with the least predicted mean rank error for these fractions at ``privacy``."""
    families = ["independent"] if len(fractions) == 1 else (["independent", "recursive"] if len(fractions) <= MAX_INDEPENDENT else ["recursive"])
    built = [ExponentialQuantiles(tuple(fractions), cells, privacy, family, contributions) for family in families]
    return min(built, key=lambda m: m.allowance * m.predicted_rank_error())


def choose(columns: Sequence[QuantileColumn], other_error: float, privacy: Privacy, contributions: int = 1) -> QuantileChoice:
    """The exponential path for a subset of ``columns`` (each with an equal part of the mechanisms' share),
    or none, by the least predicted total squared error (module doc). ``other_error`` is the expected total
    squared error of the linear workload's other products under the full-budget plan, in rows²; each
    column's CDF path error comes from its ``cdf_rank_variances``. Public facts only."""
    def total(chosen: tuple[QuantileColumn, ...], share: float) -> tuple[float, dict[str, ExponentialQuantiles]]:
        scale = _variance_scale(privacy, 1.0 - share) if chosen else 1.0
        error = other_error * scale
        mechanisms = {}
        for column in columns:
            if column in chosen:
                mechanism = design(column.fractions, column.cells, privacy.scaled(share / len(chosen)), contributions)
                mechanisms[column.name] = mechanism
                error += column.groups * sum((mechanism.allowance * e) ** 2 for e in mechanism.predicted_rank_errors())
            else:
                error += column.groups * sum(e**2 for e in column.cdf_errors(scale))
        return error, mechanisms

    best_error, best = total((), 0.0)
    best_share, best_mechanisms = 0.0, {}
    subsets = [tuple(c for i, c in enumerate(columns) if mask >> i & 1) for mask in range(1, 2 ** len(columns))]
    shares = [1.0 - BAND_SHARE] if other_error <= 0 and len(columns) == 1 else [s for s in SHARES if s <= 1.0 - BAND_SHARE]
    for chosen in subsets:
        for share in shares:
            try:
                error, mechanisms = total(chosen, share)
            except ValueError:  # a share too small for the exact coins
                continue
            if error < best_error:
                best_error, best, best_share, best_mechanisms = error, chosen, share, mechanisms
    predicted = {}
    for column in columns:
        cdf = float(np.mean(column.cdf_errors()))
        mechanism = best_mechanisms.get(column.name)
        if mechanism is None:
            try:
                mechanism = design(column.fractions, column.cells, privacy.scaled(1.0 - BAND_SHARE), contributions)
            except ValueError:
                mechanism = None
        predicted[column.name] = (mechanism.predicted_rank_error() if mechanism is not None else math.inf, cdf)
    return QuantileChoice(best_mechanisms, 1.0 - best_share, predicted)
