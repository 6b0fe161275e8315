"""Implicit linear workloads over a :class:`~planner.domain.Domain`.

A workload is a weighted union of *products*. A product is a Kronecker product of blocks, one per
*factor*; a factor is a block over a scope of one or more attributes (usually one). Attributes that no
factor mentions are summed out (the ``Total`` block), so a product only ever needs the marginal on the
attributes its factors mention:

``GROUP BY a, b WHERE c BETWEEN 3 AND 5`` is ``Identity(a) ⊗ Identity(b) ⊗ Predicate(c ∈ [3, 5])``,
answered from the (a, b, c) marginal. A predicate that couples attributes (``a = 1 OR b = 2``) is one
factor whose scope is ``(a, b)``.

Row order of a product: the Kronecker (C) order of its factors, which are kept in domain order of
their first attribute; within a factor, cells of a multi-attribute scope are in C order of the scope.

Weights scale rows: a product of weight ``w`` contributes ``w² · Var`` to the workload's total error.

>>> from planner.domain import Domain
>>> dom = Domain({"a": 2, "b": 2, "c": 2}, ordered={"c"})
>>> W = Workload.marginals(dom, [("a",), ("b", "c")])
>>> W.query_count, [p.attributes for p in W.products]
(6, [('a',), ('b', 'c')])
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.domain import Domain

DENSE_LIMIT = 2**24  # largest number of matrix entries a dense() call will build


# --------------------------------------------------------------------------------------------------
# Blocks: small matrices over the cells of one factor's scope, with fast products where it matters.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """A linear map from the ``size`` cells of a factor scope to ``rows`` query answers."""

    size: int

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"a block needs a positive integer size, got {self.size!r}")

    @property
    def rows(self) -> int:
        raise TypeError(f"{type(self).__name__} must define rows")

    def matrix(self) -> np.ndarray:
        """The dense ``rows × size`` matrix (blocks are small: one attribute or a few)."""
        raise TypeError(f"{type(self).__name__} must define matrix()")

    def apply(self, tensor: np.ndarray, axis: int) -> np.ndarray:
        """Apply the block along ``axis`` of ``tensor`` (length ``size`` there → ``rows``)."""
        moved = np.moveaxis(tensor, axis, -1)
        return np.moveaxis(moved @ self.matrix().T, -1, axis)

    def gram(self) -> np.ndarray:
        """``BᵀB`` (``size × size``)."""
        dense = self.matrix()
        return dense.T @ dense

    @property
    def is_total(self) -> bool:
        return False


@dataclass(frozen=True)
class Total(Block):
    """Sum over every cell: one row of ones."""

    @property
    def rows(self) -> int:
        return 1

    def matrix(self) -> np.ndarray:
        return np.ones((1, self.size))

    def apply(self, tensor: np.ndarray, axis: int) -> np.ndarray:
        return tensor.sum(axis=axis, keepdims=True)

    @property
    def is_total(self) -> bool:
        return True


@dataclass(frozen=True)
class Identity(Block):
    """One query per cell (GROUP BY)."""

    @property
    def rows(self) -> int:
        return self.size

    def matrix(self) -> np.ndarray:
        return np.eye(self.size)

    def apply(self, tensor: np.ndarray, axis: int) -> np.ndarray:
        return tensor

    def gram(self) -> np.ndarray:
        return np.eye(self.size)


@dataclass(frozen=True)
class Prefix(Block):
    """Row ``i`` sums cells ``0..i`` (cumulative counts on an ordered attribute)."""

    @property
    def rows(self) -> int:
        return self.size

    def matrix(self) -> np.ndarray:
        return np.tril(np.ones((self.size, self.size)))

    def apply(self, tensor: np.ndarray, axis: int) -> np.ndarray:
        return np.cumsum(tensor, axis=axis)

    def gram(self) -> np.ndarray:
        index = np.arange(self.size)
        return (self.size - np.maximum.outer(index, index)).astype(float)


@dataclass(frozen=True)
class ShiftedPrefix(Block):
    """Row ``k`` is the prefix ``0..k`` minus ``fraction`` times the prefix ``0..end``: ``F(k) − q·F(end)``,
    the rank error of a quantile answered at cell ``k`` of a CDF whose total is ``F(end)``. Implicit: range
    strategies price it from interval variances, never from an ``n × n`` matrix."""

    fraction: float = 0.0
    end: int = 0

    def __post_init__(self) -> None:
        Block.__post_init__(self)
        if not 0 <= self.end < self.size:
            raise ValueError(f"the shifted prefix's end {self.end} lies outside its {self.size} cells")

    @property
    def rows(self) -> int:
        return self.size

    def matrix(self) -> np.ndarray:
        dense = np.tril(np.ones((self.size, self.size)))
        return dense - self.fraction * dense[self.end][None, :]

    def apply(self, tensor: np.ndarray, axis: int) -> np.ndarray:
        cumulative = np.cumsum(tensor, axis=axis)
        return cumulative - self.fraction * np.take(cumulative, [self.end], axis=axis)


@dataclass(frozen=True)
class AllRange(Block):
    """Every interval ``[i, j]``, ``i ≤ j``, in lexicographic order of ``(i, j)``."""

    @property
    def rows(self) -> int:
        return self.size * (self.size + 1) // 2

    def interval_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lows, highs = np.triu_indices(self.size)
        return lows, highs

    def matrix(self) -> np.ndarray:
        lows, highs = self.interval_bounds()
        cells = np.arange(self.size)
        return ((cells >= lows[:, None]) & (cells <= highs[:, None])).astype(float)

    def apply(self, tensor: np.ndarray, axis: int) -> np.ndarray:
        moved = np.moveaxis(tensor, axis, -1)
        padded = np.concatenate([np.zeros(moved.shape[:-1] + (1,)), np.cumsum(moved, axis=-1)], axis=-1)
        result = np.empty(moved.shape[:-1] + (self.rows,))
        offset = 0
        for low in range(self.size):  # the intervals [low, low..n−1]: contiguous slices, no index arrays
            count = self.size - low
            np.subtract(padded[..., low + 1 :], padded[..., low : low + 1], out=result[..., offset : offset + count])
            offset += count
        return np.moveaxis(result, -1, axis)

    def gram(self) -> np.ndarray:
        # cell pair (u, v), u ≤ v, lies in (u + 1)(n − v) intervals
        index = np.arange(self.size)
        low, high = np.minimum.outer(index, index), np.maximum.outer(index, index)
        return ((low + 1) * (self.size - high)).astype(float)


@dataclass(frozen=True, eq=False)
class Predicate(Block):
    """One row: the 0/1 indicator of the cells satisfying a predicate (WHERE).

    The mask is a read-only boolean array (a WHERE on a column of 10⁶ values is one row of 10⁶ cells):
    its hash and its interval are computed once, not per planning question."""

    mask: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __init__(self, mask: Sequence[bool] | np.ndarray) -> None:
        values = np.array(mask, dtype=bool).ravel()
        values.setflags(write=False)
        object.__setattr__(self, "size", int(values.size))
        object.__setattr__(self, "mask", values)
        Block.__post_init__(self)

    @property
    def rows(self) -> int:
        return 1

    def matrix(self) -> np.ndarray:
        return self.mask.astype(float)[None, :]

    def interval(self) -> tuple[int, int] | None:
        """``(lo, hi)`` if the selected cells are one contiguous non-empty run, else ``None``."""
        return self._interval

    @functools.cached_property
    def _interval(self) -> tuple[int, int] | None:
        selected = np.flatnonzero(self.mask)
        if selected.size == 0 or selected[-1] - selected[0] + 1 != selected.size:
            return None
        return int(selected[0]), int(selected[-1])

    @functools.cached_property
    def _hash(self) -> int:
        return hash((self.size, self.mask.tobytes()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Predicate) and np.array_equal(self.mask, other.mask)

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True, eq=False)
class Explicit(Block):
    """Any small dense matrix (rows × size)."""

    values: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def __init__(self, values: np.ndarray) -> None:
        dense = np.array(values, dtype=float, copy=True)
        if dense.ndim != 2 or dense.shape[0] < 1:
            raise ValueError(f"an explicit block needs a non-empty 2-D matrix, got shape {dense.shape}")
        dense.setflags(write=False)
        object.__setattr__(self, "size", dense.shape[1])
        object.__setattr__(self, "values", dense)
        Block.__post_init__(self)

    @property
    def rows(self) -> int:
        return self.values.shape[0]

    def matrix(self) -> np.ndarray:
        return self.values

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Explicit) and np.array_equal(self.values, other.values)

    def __hash__(self) -> int:
        return hash((self.values.shape, self.values.tobytes()))


# --------------------------------------------------------------------------------------------------
# Factors and products.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Factor:
    """A block over the joint cells (C order) of a scope of attributes."""

    attributes: tuple[str, ...]
    block: Block

    def __post_init__(self) -> None:
        if not self.attributes:
            raise ValueError("a factor needs at least one attribute")
        if len(set(self.attributes)) != len(self.attributes):
            raise ValueError(f"repeated attribute in factor scope {self.attributes}")


@dataclass(frozen=True)
class Product:
    """A Kronecker product of factors with disjoint scopes; unmentioned attributes are summed out."""

    domain: Domain
    factors: tuple[Factor, ...]
    weight: float = 1.0

    def __post_init__(self) -> None:
        seen: set[str] = set()
        kept: list[Factor] = []
        for factor in self.factors:
            expected = math.prod(self.domain.shape(factor.attributes))
            if factor.block.size != expected:
                raise ValueError(
                    f"block over {factor.attributes} has size {factor.block.size}, the domain says {expected}"
                )
            if seen & set(factor.attributes):
                raise ValueError(f"attributes {sorted(seen & set(factor.attributes))} appear in two factors")
            seen |= set(factor.attributes)
            if not factor.block.is_total:
                kept.append(factor)
        kept.sort(key=lambda f: self.domain.index(f.attributes[0]))
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"a product weight must be positive and finite, got {self.weight}")
        object.__setattr__(self, "factors", tuple(kept))

    @functools.cached_property
    def _hash(self) -> int:
        return hash((self.domain, self.factors, self.weight))

    def __hash__(self) -> int:  # computed once: products key the planner's caches and the kept measurements
        return self._hash

    @functools.cached_property
    def attributes(self) -> tuple[str, ...]:
        """The attributes this product reads, in domain order: the marginal it needs."""
        return self.domain.canonical(a for f in self.factors for a in f.attributes)

    @property
    def rows(self) -> int:
        return math.prod(f.block.rows for f in self.factors)

    @property
    def row_shape(self) -> tuple[int, ...]:
        return tuple(f.block.rows for f in self.factors)

    def scaled(self, weight: float) -> Product:
        return Product(self.domain, self.factors, self.weight * weight)

    def unweighted_answer(self, marginal: np.ndarray) -> np.ndarray:
        """The product's queries (weight ignored) on the marginal over :attr:`attributes`."""
        attributes = self.attributes
        expected_shape = self.domain.shape(attributes)
        marginal = np.asarray(marginal, dtype=float)
        if marginal.shape != expected_shape:
            raise ValueError(f"marginal on {attributes} must have shape {expected_shape}, got {marginal.shape}")
        scope_order = [attributes.index(a) for f in self.factors for a in f.attributes]
        tensor = np.transpose(marginal, scope_order).reshape([f.block.size for f in self.factors])
        for axis, factor in enumerate(self.factors):
            tensor = factor.block.apply(tensor, axis)
        return tensor.reshape(-1)

    def matrix_on(self, attributes: Sequence[str]) -> np.ndarray:
        """Dense (unweighted) matrix over the marginal on ``attributes`` ⊇ :attr:`attributes` (C order)."""
        attributes = tuple(attributes)
        missing = set(self.attributes) - set(attributes)
        if missing:
            raise ValueError(f"product reads {sorted(missing)}, not in {attributes}")
        shape = self.domain.shape(attributes)
        cells = math.prod(shape)
        if cells * self.rows > DENSE_LIMIT:
            raise MemoryError(f"refusing to build a dense {self.rows}×{cells} matrix")
        basis = np.eye(cells).reshape((cells,) + shape)
        summed = tuple(1 + i for i, a in enumerate(attributes) if a not in self.attributes)
        own = basis.sum(axis=summed) if summed else basis
        return np.stack([self.unweighted_answer(cell) for cell in own]).T

    def gram_factors(self) -> dict[tuple[str, ...], np.ndarray]:
        """The Gram matrix of each factor (the product's Gram is their Kronecker product ⊗ 11ᵀ)."""
        return {f.attributes: f.block.gram() for f in self.factors}


def _identity_product(domain: Domain, attributes: Iterable[str], weight: float = 1.0) -> Product:
    kept = domain.canonical(attributes)
    return Product(domain, tuple(Factor((a,), Identity(domain.size_of(a))) for a in kept), weight)


# --------------------------------------------------------------------------------------------------
# Workloads.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """A weighted union of products over one domain."""

    domain: Domain
    products: tuple[Product, ...]

    def __post_init__(self) -> None:
        if not self.products:
            raise ValueError("a workload needs at least one product")
        for product in self.products:
            if product.domain != self.domain:
                raise ValueError("all products of a workload must share its domain")
        object.__setattr__(self, "products", tuple(self.products))

    # -- constructors ------------------------------------------------------------------------------
    @classmethod
    def marginals(cls, domain: Domain, attribute_sets: Iterable[Iterable[str]], weight: float = 1.0) -> Workload:
        """One product per attribute set: the full contingency table on those attributes."""
        return cls(domain, tuple(_identity_product(domain, attrs, weight) for attrs in attribute_sets))

    @classmethod
    def all_kway(cls, domain: Domain, k: int, weight: float = 1.0) -> Workload:
        """Every k-way marginal."""
        if not 0 <= k <= len(domain):
            raise ValueError(f"k must be between 0 and {len(domain)}, got {k}")
        return cls.marginals(domain, itertools.combinations(domain.attributes, k), weight)

    @classmethod
    def identity(cls, domain: Domain, weight: float = 1.0) -> Workload:
        """Every cell of the full domain."""
        return cls.marginals(domain, [domain.attributes], weight)

    @classmethod
    def total(cls, domain: Domain, weight: float = 1.0) -> Workload:
        return cls.marginals(domain, [()], weight)

    @classmethod
    def _one_block(cls, domain: Domain, attribute: str, block: Block, weight: float) -> Workload:
        return cls(domain, (Product(domain, (Factor((attribute,), block),), weight),))

    @classmethod
    def all_range(cls, domain: Domain, attribute: str, weight: float = 1.0) -> Workload:
        """Every interval on one ordered attribute (others summed out)."""
        _require_ordered(domain, attribute)
        return cls._one_block(domain, attribute, AllRange(domain.size_of(attribute)), weight)

    @classmethod
    def prefix(cls, domain: Domain, attribute: str, weight: float = 1.0) -> Workload:
        """Every prefix (cumulative count) on one ordered attribute."""
        _require_ordered(domain, attribute)
        return cls._one_block(domain, attribute, Prefix(domain.size_of(attribute)), weight)

    # -- algebra -----------------------------------------------------------------------------------
    def __add__(self, other: Workload) -> Workload:
        if not isinstance(other, Workload):
            return NotImplemented
        if other.domain != self.domain:
            raise ValueError("cannot add workloads over different domains")
        return Workload(self.domain, self.products + other.products)

    def __mul__(self, weight: float) -> Workload:
        if not isinstance(weight, (int, float)) or isinstance(weight, bool):
            return NotImplemented
        return Workload(self.domain, tuple(p.scaled(float(weight)) for p in self.products))

    __rmul__ = __mul__

    # -- queries -----------------------------------------------------------------------------------
    @property
    def query_count(self) -> int:
        return sum(p.rows for p in self.products)

    def marginal_attributes(self) -> tuple[tuple[str, ...], ...]:
        """The distinct marginals (attribute tuples, domain order) the products read."""
        return tuple(dict.fromkeys(p.attributes for p in self.products))

    def answer(self, marginals: Mapping[tuple[str, ...], np.ndarray]) -> list[np.ndarray]:
        """Exact (unweighted) answers of every product, from marginals on at least its attributes."""
        return [p.unweighted_answer(marginal_for(self.domain, marginals, p.attributes)) for p in self.products]

    def dense(self) -> np.ndarray:
        """The full weighted ``q × n`` matrix over the whole domain (small domains only: tests, LDP)."""
        if self.query_count * self.domain.size > DENSE_LIMIT:
            raise MemoryError(
                f"refusing to build a dense {self.query_count}×{self.domain.size} workload matrix"
            )
        return np.vstack([p.weight * p.matrix_on(self.domain.attributes) for p in self.products])


def _require_ordered(domain: Domain, attribute: str) -> None:
    if not domain.is_ordered(attribute):
        raise ValueError(f"attribute {attribute!r} is not ordered; range and prefix queries need an order")


def marginal_for(
    domain: Domain, marginals: Mapping[tuple[str, ...], np.ndarray], attributes: tuple[str, ...]
) -> np.ndarray:
    """The marginal on ``attributes``, summed down from any given marginal that contains them."""
    if attributes in marginals:
        return np.asarray(marginals[attributes], dtype=float)
    for held, table in marginals.items():
        if set(attributes) <= set(held):
            summed = tuple(i for i, a in enumerate(held) if a not in attributes)
            return np.asarray(table, dtype=float).sum(axis=summed)
    raise KeyError(f"no marginal given covers {attributes}; have {list(marginals)}")
