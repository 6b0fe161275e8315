"""Shared plumbing for strategies on one ordered attribute (hierarchies, eigen-designs).

A range strategy measures the marginal on ``measured`` = every attribute the workload reads plus one
ordered attribute ``t``: for each cell of the other attributes it applies a 1-D strategy along ``t``.
Measurements of different cells are independent with the same 1-D covariance ``Σ_t``, so the GLS
estimate of the marginal has covariance ``I ⊗ Σ_t`` and a workload row ``r_o ⊗ r_t`` (other attributes
⊗ ``t``) has variance ``‖r_o‖² · r_tᵀ Σ_t r_t``; an attribute of ``measured`` that a product sums out
contributes its size to ``‖r_o‖²``.

Each 1-D strategy answers two questions about ``Σ_t`` for a query block on ``t`` (see
:class:`OrderedCovariance`): the variance of every row, and their sum. Blocks on ``t`` are ranges
(:class:`Intervals`: ``Prefix``, ``AllRange``, ``Identity``, ``Total``, interval ``Predicate``) or
small dense rows (any other ``Predicate`` or ``Explicit`` block).
"""

from __future__ import annotations

import math
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from planner import caches
from planner.privacy import Privacy
from planner.recovery import integer_counts
from planner.strategies.base import Answers, Candidate, Measurement
from planner.workload import (
    AllRange,
    Block,
    Identity,
    Predicate,
    Prefix,
    Product,
    ShiftedPrefix,
    Total,
    Workload,
    marginal_for,
)

MAX_MEASURED_CELLS = 2**24  # cells of the measured marginal (other attributes × padded ordered attribute)
MAX_DENSE_ROWS = 2**22  # entries of a non-interval block on the ordered attribute handled densely
BLOCK_ENTRIES = 2**15  # dense n × n work goes through row blocks of about this many entries (256 KiB: in cache)


def block_bounds(size: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of consecutive blocks of rows of a ``size × size`` matrix."""
    step = max(1, BLOCK_ENTRIES // size)
    return [(start, min(start + step, size)) for start in range(0, size, step)]


@dataclass(frozen=True, eq=False)
class Intervals:
    """Rows that are the intervals ``[lows[i], highs[i]]`` (inclusive) of ``size`` ordered cells."""

    size: int
    lows: np.ndarray
    highs: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return (self.highs - self.lows + 1).astype(float)


def block_rows(block: Block) -> Intervals | np.ndarray:
    """A block on the ordered attribute as intervals when it is made of ranges, else its dense rows."""
    n = block.size
    if isinstance(block, Prefix):
        return Intervals(n, np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64))
    if isinstance(block, AllRange):  # the order of AllRange.interval_bounds, built without a mask
        cells = np.arange(n, dtype=np.int64)
        lows = np.repeat(cells, n - cells)
        starts = np.repeat(np.cumsum(n - cells) - (n - cells), n - cells)
        return Intervals(n, lows, np.arange(lows.size, dtype=np.int64) - starts + lows)
    if isinstance(block, Identity):
        cells = np.arange(n, dtype=np.int64)
        return Intervals(n, cells, cells)
    if isinstance(block, Total):
        return Intervals(n, np.zeros(1, dtype=np.int64), np.full(1, n - 1, dtype=np.int64))
    if isinstance(block, IntervalRows):
        return Intervals(n, block.lows, block.highs)
    if isinstance(block, Predicate) and block.interval() is not None:
        low, high = block.interval()
        return Intervals(n, np.array([low], dtype=np.int64), np.array([high], dtype=np.int64))
    return block.matrix()


@dataclass(frozen=True, eq=False)
class IntervalRows(Block):
    """Rows that are the intervals ``[lows[i], highs[i]]`` of ``size`` ordered cells, as a block (the
    intervals a :class:`ShiftedPrefix` is priced from)."""

    lows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    highs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def rows(self) -> int:
        return int(self.lows.size)

    def matrix(self) -> np.ndarray:
        cells = np.arange(self.size)
        return ((cells >= self.lows[:, None]) & (cells <= self.highs[:, None])).astype(float)


def block_variances(covariance: OrderedCovariance, block: Block) -> np.ndarray:
    """``r Σ_t rᵀ`` for every row of ``block``; a :class:`ShiftedPrefix` through interval variances
    (``O(n)`` rows of a covariance that answers intervals cheaply, never its ``n × n`` matrix):
    ``Var(F_k − q F_e) = v(0,k) + q² v(0,e) − q (v(0,k) + v(0,e) − v(between))``, since
    ``2 Cov(F_a, F_b) = v(0,a) + v(0,b) − v(min(a,b)+1, max(a,b))`` (the prefixes differ by that interval)."""
    if not isinstance(block, ShiftedPrefix):
        return covariance.variances(block)
    q = block.fraction
    prefix, between = _prefix_parts(covariance, block.size, block.end)
    return prefix + q * q * prefix[block.end] - q * (prefix + prefix[block.end] - between)


def _prefix_parts(covariance: OrderedCovariance, size: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """``v(0,k)`` and ``v(min(k,end)+1, max(k,end))`` for every ``k``: the same for every quantile of a CDF
    (only ``q`` differs), so kept per covariance and ``end``."""
    kept = _PREFIX_PARTS.setdefault(covariance, {})
    if (size, end) not in kept:
        prefix = covariance.variances(Prefix(size))
        cells = np.arange(size, dtype=np.int64)
        lows, highs = np.minimum(cells, end) + 1, np.maximum(cells, end)
        between = np.zeros(size)
        apart = lows <= highs
        if apart.any():
            between[apart] = covariance.variances(IntervalRows(size, lows[apart], highs[apart]))
        kept[(size, end)] = (prefix, between)
    return kept[(size, end)]


_PREFIX_PARTS: weakref.WeakKeyDictionary[OrderedCovariance, dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]] = weakref.WeakKeyDictionary()


def row_norms2(block: Block) -> np.ndarray:
    """``‖row‖²`` of every row of a block (ranges by their lengths, without densifying)."""
    rows = block_rows(block)
    if isinstance(rows, Intervals):
        return rows.lengths
    return (rows**2).sum(axis=1)


def is_range_block(block: Block) -> bool:
    return isinstance(block, (Prefix, AllRange)) or (isinstance(block, Predicate) and block.interval() is not None)


class OrderedCovariance(ABC):
    """The covariance ``Σ_t`` of a 1-D strategy's GLS estimate of the ``size`` ordered cells."""

    size: int

    @abstractmethod
    def variances(self, block: Block) -> np.ndarray:
        """``r Σ_t rᵀ`` for every row ``r`` of ``block``."""

    def trace(self, block: Block) -> float:
        """``tr(B Σ_t Bᵀ)``; strategies override it with closed forms where ``B`` has many rows."""
        return float(self.variances(block).sum())


class DenseCovariance(OrderedCovariance):
    """A covariance given as a dense ``n × n`` matrix; variances through the prefix-sum covariance
    ``K = L Σ_t Lᵀ`` (a range ``[l, h]`` has variance ``K_hh + K_ll − 2K_lh`` over prefix ends)."""

    @abstractmethod
    def matrix(self) -> np.ndarray:
        """``Σ_t`` densely."""

    def row_blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, Σ_t[start:stop])`` over :func:`block_bounds` (overridden where rows are generated
        without the dense matrix)."""
        dense = self.matrix()
        for start, stop in block_bounds(self.size):
            yield start, dense[start:stop]

    @cached_property
    def prefix_covariance(self) -> np.ndarray:
        """``K`` with a zero row and column in front (index 0 is the empty prefix), one row block of
        ``Σ_t`` at a time: cumulative sums along each row, then down the block's rows from the row above it."""
        n = self.size
        padded = np.empty((n + 1, n + 1))
        padded[0] = 0.0
        padded[:, 0] = 0.0
        for start, rows in self.row_blocks():
            sums = np.cumsum(rows, axis=1)
            np.cumsum(sums, axis=0, out=sums)
            np.add(sums, padded[start, 1:], out=padded[start + 1 : start + 1 + rows.shape[0], 1:])
        return padded

    def trace(self, block: Block) -> float:
        """All ranges: every prefix end ``m`` is an end of ``n`` ranges, so the sum of
        ``K_hh + K_ll − 2K_lh`` over ``l < h`` is ``(n+1) tr K − ΣK``; prefixes: ``tr K``."""
        K = self.prefix_covariance
        if isinstance(block, AllRange):
            return float((self.size + 1) * np.trace(K) - K.sum())
        if isinstance(block, Prefix):
            return float(np.trace(K))
        return super().trace(block)

    def variances(self, block: Block) -> np.ndarray:
        K = self.prefix_covariance
        if isinstance(block, AllRange):
            return all_range_variances(K)
        rows = block_rows(block)
        if isinstance(rows, Intervals):
            start, stop = rows.lows, rows.highs + 1
            return K[stop, stop] + K[start, start] - 2 * K[start, stop]
        differences = np.zeros((rows.shape[0], self.size + 1))
        differences[:, 1:] = rows
        differences[:, :-1] -= rows  # r = Σ_j (r_j − r_{j+1}) · prefix_j
        return np.einsum("ij,jk,ik->i", differences, K, differences)


def all_range_variances(K: np.ndarray) -> np.ndarray:
    """``K_hh + K_ll − 2K_lh`` over prefix ends ``l < h`` in ``AllRange`` order (by ``l``, then ``h``),
    one contiguous row slice of ``K`` per ``l`` instead of gathering ``3·n²/2`` scattered entries."""
    n = K.shape[0] - 1
    diagonal = np.diagonal(K)
    result = np.empty(n * (n + 1) // 2)
    offset = 0
    for low in range(n):
        out = result[offset : offset + n - low]
        np.add(diagonal[low + 1 :], diagonal[low], out=out)
        out -= 2 * K[low, low + 1 :]
        offset += n - low
    return result


@dataclass(frozen=True)
class RangeLayout:
    """The measured marginal of a range strategy: ``t`` plus every attribute the workload reads."""

    workload: Workload
    attribute: str

    @property
    def measured(self) -> tuple[str, ...]:
        domain = self.workload.domain
        return domain.canonical([self.attribute, *(a for p in self.workload.products for a in p.attributes)])

    @property
    def size(self) -> int:
        return self.workload.domain.size_of(self.attribute)

    @property
    def other_cells(self) -> int:
        return math.prod(self.workload.domain.shape(a for a in self.measured if a != self.attribute))

    def ordered_block(self, product: Product) -> Block:
        """The product's block on ``t`` (``Total`` when it sums ``t`` out)."""
        for factor in product.factors:
            if self.attribute in factor.attributes:
                return factor.block
        return Total(self.size)

    def _summed_size(self, product: Product) -> int:
        read = set(product.attributes) | {self.attribute}
        return math.prod(self.workload.domain.size_of(a) for a in self.measured if a not in read)

    def other_mass(self, product: Product) -> float:
        """``‖W_o‖²_F``: the squared Frobenius norm of the product's factors off ``t``."""
        mass = float(self._summed_size(product))
        for factor in product.factors:
            if self.attribute not in factor.attributes:
                mass *= float(row_norms2(factor.block).sum())
        return mass

    def product_variances(self, product: Product, covariance: OrderedCovariance) -> np.ndarray:
        """Variance of every row of ``product`` (Kronecker row order) under ``I ⊗ Σ_t``."""
        ordered = block_variances(covariance, self.ordered_block(product))
        result = np.asarray(float(self._summed_size(product)))
        mentions = False
        for factor in product.factors:
            if self.attribute in factor.attributes:
                rows, mentions = ordered, True
            else:
                rows = row_norms2(factor.block)
            # 1 ⊗ rows = rows exactly: skip the copy (all ranges on one attribute have n²/2 rows)
            result = rows if result.ndim == 0 and float(result) == 1.0 else np.multiply.outer(result, rows)
        if not mentions:
            result = result * ordered[0]
        return np.asarray(result, dtype=float).reshape(-1)

    def total_error(self, covariance: OrderedCovariance) -> float:
        """``Σ_products w² ‖W_o‖²_F tr(B_t Σ_t B_tᵀ)``."""
        return float(
            sum(
                p.weight**2 * self.other_mass(p) * covariance.trace(self.ordered_block(p))
                for p in self.workload.products
            )
        )

    def leaves(self, marginals: Mapping[tuple[str, ...], np.ndarray]) -> np.ndarray:
        """The exact integer marginal on ``measured`` as ``(other cells, size)`` (``t`` last)."""
        measured = self.measured
        table = integer_counts(marginal_for(self.workload.domain, marginals, measured), measured)
        axis = measured.index(self.attribute)
        return np.moveaxis(table, axis, -1).reshape(-1, self.size)

    def answers(self, estimate: np.ndarray, covariance: OrderedCovariance) -> Answers:
        """Workload answers from the GLS estimate ``(other cells, size)`` of the measured marginal."""
        domain = self.workload.domain
        measured = self.measured
        moved = [a for a in measured if a != self.attribute] + [self.attribute]
        table = np.moveaxis(estimate.reshape(domain.shape(moved)), -1, measured.index(self.attribute))
        values = tuple(
            p.unweighted_answer(marginal_for(domain, {measured: table}, p.attributes)) for p in self.workload.products
        )
        return Answers(values, self.query_variances(covariance))

    def query_variances(self, covariance: OrderedCovariance) -> tuple[np.ndarray, ...]:
        return tuple(self.product_variances(p, covariance) for p in self.workload.products)


class GramOperator:
    """``X ↦ G X`` for the workload Gram on the ordered attribute, ``G = Σ_p w² ‖W_o‖²_F B_pᵀB_p`` (a
    strategy whose estimate of ``t`` has covariance ``Σ_t`` has error ``tr(G Σ_t)``): prefixes and all
    ranges by cumulative sums, identities and totals directly (one weight per kind), every other block's
    rows stacked into one matrix ``F`` (``FᵀF`` instead when ``F`` has more rows than cells)."""

    STRUCTURED = (Prefix, AllRange, Identity, Total)

    def __init__(self, layout: RangeLayout) -> None:
        self.size = layout.size
        self.weights = dict.fromkeys(self.STRUCTURED, 0.0)
        others = [np.zeros((0, self.size))]
        for product in layout.workload.products:
            weight, block = product.weight**2 * layout.other_mass(product), layout.ordered_block(product)
            if isinstance(block, self.STRUCTURED):
                self.weights[type(block)] += weight
            else:
                others.append(math.sqrt(weight) * block.matrix())
        stacked = np.vstack(others)
        self.diagonal = self._structured_diagonal() + (stacked**2).sum(axis=0)
        self.factor: np.ndarray | None = stacked if stacked.shape[0] <= self.size else None
        self.dense: np.ndarray | None = None if self.factor is not None else stacked.T @ stacked

    def _structured_diagonal(self) -> np.ndarray:
        cells = np.arange(self.size, dtype=float)
        return (
            self.weights[Prefix] * (self.size - cells)
            + self.weights[AllRange] * (cells + 1) * (self.size - cells)
            + self.weights[Identity]
            + self.weights[Total]
        )

    def partner_entries(self, partners: np.ndarray) -> np.ndarray:
        """``G[j, partners[j]]`` for every cell ``j``."""
        cells, other = np.arange(self.size), partners
        low, high = np.minimum(cells, other).astype(float), np.maximum(cells, other).astype(float)
        entries = (
            self.weights[Prefix] * (self.size - high)
            + self.weights[AllRange] * (low + 1) * (self.size - high)
            + self.weights[Identity] * (cells == other)
            + self.weights[Total]
        )
        if self.factor is not None:
            return entries + np.sum(self.factor * self.factor[:, other], axis=0)
        return entries + self.dense[cells, other]

    def signature(self) -> tuple[object, ...]:
        """Everything ``G`` depends on, hashable."""
        kinds = tuple(sorted((kind.__name__, weight) for kind, weight in self.weights.items()))
        rows = self.factor if self.factor is not None else self.dense
        return (self.size, kinds, caches.digest(rows), rows.shape)

    def __call__(self, matrix: np.ndarray) -> np.ndarray:
        """``G X`` for ``X`` of shape ``(size, columns)``; kinds of weight 0 and an empty ``F`` cost nothing."""
        result = np.zeros(matrix.shape)
        if self.weights[Identity]:
            result += self.weights[Identity] * matrix
        if self.weights[Total]:
            result += self.weights[Total] * matrix.sum(axis=0)
        if self.weights[Prefix]:  # LᵀL: prefix sums, then suffix sums
            result += self.weights[Prefix] * np.cumsum(np.cumsum(matrix, axis=0)[::-1], axis=0)[::-1]
        if self.weights[AllRange]:  # rows P_h − P_l over prefix ends 0..n: DᵀD = (n+1)I − 11ᵀ
            prefixes = np.zeros((self.size + 1, matrix.shape[1]))
            np.cumsum(matrix, axis=0, out=prefixes[1:])
            spread = (self.size + 1) * prefixes - prefixes.sum(axis=0)
            result += self.weights[AllRange] * np.cumsum(spread[::-1], axis=0)[::-1][1:]
        if self.factor is not None:
            if self.factor.shape[0]:
                result += self.factor.T @ (self.factor @ matrix)
            return result
        return result + self.dense @ matrix


def range_layouts(workload: Workload) -> list[RangeLayout]:
    """One layout per ordered attribute that carries ranges in some product and is never coupled to
    another attribute in a factor; empty when the measured marginal would be too large."""
    layouts = []
    for attribute in workload.domain.attributes:
        if not workload.domain.is_ordered(attribute):
            continue
        factors = [f for p in workload.products for f in p.factors if attribute in f.attributes]
        if not any(is_range_block(f.block) for f in factors) or any(len(f.attributes) > 1 for f in factors):
            continue
        if not all(_cheap(f.block) for p in workload.products for f in p.factors):
            continue
        layout = RangeLayout(workload, attribute)
        if layout.other_cells * layout.size <= MAX_MEASURED_CELLS:
            layouts.append(layout)
    return layouts


def _cheap(block: Block) -> bool:
    """Whether the rows of ``block`` can be handled without a large dense matrix."""
    return isinstance(block, (Prefix, ShiftedPrefix, AllRange, Identity, Total, Predicate)) or block.rows * block.size <= MAX_DENSE_ROWS


class RangeCandidate(Candidate):
    """A candidate measuring one 1-D strategy per cell of the other attributes (see the module doc)."""

    def __init__(self, layout: RangeLayout, privacy: Privacy) -> None:
        self._layout = layout
        self._privacy = privacy

    @property
    def layout(self) -> RangeLayout:
        return self._layout

    @property
    def workload(self) -> Workload:
        return self._layout.workload

    @property
    def privacy(self) -> Privacy:
        return self._privacy

    @property
    @abstractmethod
    def covariance(self) -> OrderedCovariance:
        """``Σ_t`` of this strategy's GLS estimate, with the exact discrete noise variances."""

    @abstractmethod
    def estimate(self, measurement: Measurement) -> np.ndarray:
        """GLS estimate ``(other cells, size)`` of the measured marginal."""

    def query_variances(self) -> tuple[np.ndarray, ...]:
        return self._layout.query_variances(self.covariance)

    def variances_of(self, product: Product) -> np.ndarray | None:
        """``I ⊗ Σ_t`` answers any product over the measured marginal's attributes with cheap factors."""
        layout = self._layout
        if product.domain != layout.workload.domain or not set(product.attributes) <= set(layout.measured):
            return None
        if any(len(f.attributes) > 1 or not _cheap(f.block) for f in product.factors):
            return None
        return layout.product_variances(product, self.covariance)

    def expected_error(self) -> float:
        return self._layout.total_error(self.covariance)

    def required_marginals(self) -> tuple[tuple[str, ...], ...]:
        return (self._layout.measured,)

    def answer(self, measurement: Measurement) -> Answers:
        if measurement.strategy != self.name:
            raise ValueError(f"this measurement was made by {measurement.strategy!r}, not {self.name!r}")
        return self._layout.answers(self.estimate(measurement), self.covariance)
