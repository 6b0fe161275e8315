"""Recovery in an orthogonal per-attribute basis: GLS for marginal-type strategies (docs/math.md §3, §4).

Every attribute ``a`` gets an orthonormal basis ``U_a`` of ``ℝ^{p_a}`` whose first column is constant
(``p_a ≥ n_a`` is the padded size: Hadamard bases pad to a power of two, the extra cells being structural
zeros). For an attribute subset ``T`` the *residual* of ``x`` on ``T`` is

    φ_T = (⊗_{a∈T} Q_aᵀ) M_T x,          Q_a = U_a without its constant column,

a vector of ``Π_{a∈T}(p_a − 1)`` coefficients. Every marginal is a sum of residuals,

    M_A x = Σ_{T⊆A} (⊗_{a∈T} Q_a ⊗ ⊗_{a∈A∖T} 1/p_a) φ_T,

and a noisy marginal ``ŷ_B`` with i.i.d. per-cell variance ``v_B`` gives independent estimates
``(⊗_{T} Q_aᵀ ⊗ 1ᵀ_{B∖T}) ŷ_B`` of every ``φ_T, T ⊆ B``, each with isotropic variance
``v_B Π_{a∈B∖T} p_a``. Because these estimates are uncorrelated across ``T`` and across measurements,
GLS is the inverse-variance mean of the estimates of each coefficient, and the GLS covariance of any
marginal is diagonal in ``⊗_a U_a``. All of it costs time linear in the marginal cells involved.

A :class:`CoefficientVariances` maps ``T`` to the (per-coefficient) variance of ``φ̂_T``;
:func:`product_variances` turns it into the exact variance of every query of a workload product, and
:func:`coefficient_masses` gives the workload's recovery mass on every coefficient (the ``a`` of §2).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner import caches
from planner.workload import Block, Factor, Product, Workload

Subset = tuple[str, ...]
CoefficientVariances = Mapping[Subset, np.ndarray]


# --------------------------------------------------------------------------------------------------
# Per-attribute bases.
# --------------------------------------------------------------------------------------------------


def helmert_rows(size: int) -> np.ndarray:
    """Integer Helmert contrasts: row ``k−1`` is ``(1, …, 1 [k times], −k, 0, …)``, ``k = 1..size−1``.

    The rows are mutually orthogonal and orthogonal to the constant vector; row ``k−1`` has squared
    norm ``k(k+1)``.
    """
    rows = np.zeros((size - 1, size), dtype=np.int64)
    for k in range(1, size):
        rows[k - 1, :k] = 1
        rows[k - 1, k] = -k
    return rows


def hadamard_rows(size: int) -> np.ndarray:
    """The ±1 Sylvester–Hadamard matrix of a power-of-two ``size`` (row ``α``, column ``β``: (−1)^⟨α,β⟩)."""
    if size < 1 or size & (size - 1):
        raise ValueError(f"a Hadamard matrix needs a power-of-two size, got {size}")
    matrix = np.ones((1, 1), dtype=np.int64)
    while matrix.shape[0] < size:
        matrix = np.block([[matrix, matrix], [matrix, -matrix]])
    return matrix


@dataclass(frozen=True, eq=False)
class AttributeBasis:
    """An orthonormal basis ``U`` (columns) of ``ℝ^{padded}`` with a constant first column, for an
    attribute of ``size ≤ padded`` real cells. ``rows`` is the integer form of the non-constant basis
    vectors (row ``c−1`` ∝ column ``c`` of ``U``), which is what integer-valued strategies measure."""

    size: int
    padded: int
    matrix: np.ndarray  # padded × padded, orthonormal columns, column 0 constant
    rows: np.ndarray  # (padded − 1) × padded integers

    @functools.cached_property
    def row_norms2(self) -> np.ndarray:
        """Squared norms of the integer rows (read-only)."""
        norms2 = (self.rows.astype(float) ** 2).sum(axis=1)
        norms2.setflags(write=False)
        return norms2

    @property
    def residual_matrix(self) -> np.ndarray:
        """``Q``: the non-constant columns of ``U`` restricted to the real cells (size × (padded − 1))."""
        return self.matrix[: self.size, 1:]


def _basis_from_rows(size: int, padded: int, integer_rows: np.ndarray) -> AttributeBasis:
    norms = np.sqrt((integer_rows.astype(float) ** 2).sum(axis=1))
    matrix = np.column_stack([np.full(padded, 1.0 / math.sqrt(padded)), (integer_rows / norms[:, None]).T])
    matrix.setflags(write=False)
    integer_rows.setflags(write=False)
    return AttributeBasis(size, padded, matrix, integer_rows)


@functools.lru_cache(maxsize=512)
def helmert_basis(size: int) -> AttributeBasis:
    """Helmert basis: no padding, integer rows of the smallest possible magnitude."""
    return _basis_from_rows(size, size, helmert_rows(size))


@functools.lru_cache(maxsize=512)
def hadamard_basis(size: int) -> AttributeBasis:
    """Bit-encoded Fourier basis: pad to ``2^⌈log₂ size⌉`` cells, ±1 rows."""
    padded = 1 << max(size - 1, 0).bit_length()
    return _basis_from_rows(size, padded, hadamard_rows(padded)[1:])


Bases = Mapping[str, AttributeBasis]


def subsets(attributes: Subset) -> Iterable[Subset]:
    """Every subset of ``attributes`` (in the given order), smallest first."""
    for size in range(len(attributes) + 1):
        yield from itertools.combinations(attributes, size)


def downward_closure(attribute_sets: Iterable[Subset]) -> tuple[Subset, ...]:
    """All subsets of the given sets, deduplicated, by size then first appearance."""
    closure: dict[Subset, None] = {}
    for attributes in attribute_sets:
        for subset in subsets(attributes):
            closure.setdefault(subset, None)
    return tuple(sorted(closure, key=len))


def first_containing(wanted: Iterable[Subset], held: Sequence[Subset]) -> dict[Subset, int]:
    """For each wanted attribute set, the index of the first ``held`` set containing it (absent when none
    does). One integer bitset of holders per attribute, intersected over the wanted set's attributes:
    linear in the attributes involved, not in ``|wanted| × |held|``."""
    holders: dict[str, int] = {}
    for index, attributes in enumerate(held):
        for attribute in attributes:
            holders[attribute] = holders.get(attribute, 0) | 1 << index
    everyone = (1 << len(held)) - 1
    found = {}
    for attributes in wanted:
        common = everyone
        for attribute in attributes:
            common &= holders.get(attribute, 0)
        if common:
            found[attributes] = (common & -common).bit_length() - 1
    return found


def residual_shape(subset: Subset, bases: Bases) -> tuple[int, ...]:
    return tuple(bases[a].padded - 1 for a in subset)


def padded_count(attributes: Iterable[str], bases: Bases) -> int:
    return math.prod(bases[a].padded for a in attributes)


# --------------------------------------------------------------------------------------------------
# Marginals ↔ residuals.
# --------------------------------------------------------------------------------------------------


def _apply_along(tensor: np.ndarray, matrix: np.ndarray, axis: int) -> np.ndarray:
    """Contract ``tensor``'s ``axis`` with ``matrix``'s first index (``matrix`` is in × out)."""
    return np.moveaxis(np.tensordot(tensor, matrix, axes=([axis], [0])), -1, axis)


def integer_counts(table: np.ndarray, attributes: Subset) -> np.ndarray:
    """A count marginal as a fresh int64 array (noise may be added in place), refusing non-integral values
    (noise must go on integer rows)."""
    values = np.asarray(table)
    if np.issubdtype(values.dtype, np.integer):
        return values.astype(np.int64)
    if not np.issubdtype(values.dtype, np.floating) or not np.array_equal(values, np.round(values)):
        raise TypeError(f"the marginal on {attributes} must hold integer counts, got {values.dtype} values")
    return values.astype(np.int64)


def integer_residuals(requests: Sequence[tuple[np.ndarray, Subset, Subset]], bases: Bases) -> list[np.ndarray]:
    """``(⊗_{a∈T} rows_a ⊗ 1ᵀ_{B∖T}) y_B`` in exact integer arithmetic for each ``(y_B, B, T)``: the
    integer strategy rows of subset ``T`` applied to a count marginal on ``held = B ⊇ T`` (padded cells
    are structural zeros). Requests of the same shape (bases of ``B``, positions of ``T`` in it) are
    computed together."""
    found: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(requests)

    def shape_of(request: tuple[np.ndarray, Subset, Subset]) -> Hashable:
        _, held, subset = request
        return tuple(bases[a] for a in held), tuple(i for i, a in enumerate(held) if a in subset)

    for (held_bases, positions), members in _grouped(requests, shape_of).items():
        tensor = np.stack([integer_counts(requests[i][0], requests[i][1]) for i in members])
        summed = tuple(1 + i for i in range(len(held_bases)) if i not in positions)
        tensor = tensor.sum(axis=summed) if summed else tensor
        for axis, position in enumerate(positions, start=1):
            basis = held_bases[position]
            tensor = _apply_along(tensor, basis.rows[:, : basis.size].T, axis)
        for i, rows in zip(members, tensor):
            found[i] = rows
    return found


def integer_row_norms2(subset: Subset, bases: Bases) -> np.ndarray:
    """Squared norms of the integer rows of subset ``T`` (shape: the residual shape of ``T``; read-only)."""
    return _outer_row_norms2(tuple(bases[a] for a in subset))


@functools.lru_cache(maxsize=4096)
def _outer_row_norms2(subset_bases: tuple[AttributeBasis, ...]) -> np.ndarray:
    norms2 = functools.reduce(np.multiply.outer, [b.row_norms2 for b in subset_bases], np.asarray(1.0))
    norms2.setflags(write=False)
    return norms2


def residual_of_marginal(table: np.ndarray, held: Subset, subset: Subset, bases: Bases) -> np.ndarray:
    """``(⊗_{a∈T} Q_aᵀ ⊗ 1ᵀ_{B∖T}) y_B``: the residual ``φ_T`` computed from a marginal on ``B ⊇ T``
    (``table`` over the real cells of ``held``, no padding needed: padded cells are zero)."""
    summed = tuple(i for i, a in enumerate(held) if a not in subset)
    tensor = np.asarray(table, dtype=float).sum(axis=summed) if summed else np.asarray(table, dtype=float)
    for axis, attribute in enumerate(subset):
        tensor = _apply_along(tensor, bases[attribute].residual_matrix, axis)
    return tensor


def marginal_from_residuals(attributes: Subset, residuals: Mapping[Subset, np.ndarray], bases: Bases) -> np.ndarray:
    """The marginal on ``attributes`` (real cells) rebuilt from ``φ_T`` for every ``T ⊆ attributes``."""
    return marginals_from_residuals([attributes], residuals, bases)[0]


def marginals_from_residuals(
    attribute_sets: Sequence[Subset], residuals: Mapping[Subset, np.ndarray], bases: Bases
) -> list[np.ndarray]:
    """:func:`marginal_from_residuals` for many marginals: those whose attributes have the same bases
    (all k-way marginals over equal sizes) are rebuilt together, one array operation per subset and axis."""
    rebuilt: list[np.ndarray] = [np.zeros(0)] * len(attribute_sets)
    for members in _grouped(attribute_sets, lambda s: tuple(bases[a] for a in s)).values():
        first = attribute_sets[members[0]]
        coefficients = _filled(
            [attribute_sets[i] for i in members], residuals, bases,
            lambda spread: 1.0 / math.sqrt(spread), multiply=True,
        )
        for axis, attribute in enumerate(first, start=1):
            basis = bases[attribute]
            coefficients = _apply_along(coefficients, basis.matrix[: basis.size].T, axis)
        for i, marginal in zip(members, coefficients):
            rebuilt[i] = marginal
    return rebuilt


def _grouped(items: Sequence[object], signature: Callable[[object], Hashable]) -> dict[Hashable, list[int]]:
    """Positions of ``items`` by signature (first appearance order)."""
    groups: dict[Hashable, list[int]] = {}
    for position, item in enumerate(items):
        groups.setdefault(signature(item), []).append(position)
    return groups


def _filled(
    attribute_sets: Sequence[Subset],
    values: Mapping[Subset, np.ndarray],
    bases: Bases,
    scale: Callable[[int], float],
    multiply: bool,
) -> np.ndarray:
    """One padded coefficient tensor per attribute set (stacked on a first axis; all sets share their
    bases position by position): ``values[T]`` on the block of ``T ⊆ A`` (the non-constant coefficients of
    ``T``'s attributes, the constant one of the others), times (or divided by, ``multiply=False``)
    ``scale(Π_{a∈A∖T} p_a)``."""
    first = attribute_sets[0]
    padded = [bases[a].padded for a in first]
    tensor = np.zeros((len(attribute_sets), *padded))
    for positions in subsets(tuple(range(len(first)))):
        index = (slice(None),) + tuple(slice(1, None) if i in positions else 0 for i in range(len(first)))
        shape = tuple(padded[i] - 1 for i in positions)
        block = _stacked([values[tuple(a[i] for i in positions)] for a in attribute_sets], shape)
        factor = scale(math.prod(padded[i] for i in range(len(first)) if i not in positions))
        tensor[index] = block * factor if multiply else block / factor
    return tensor


def _stacked(arrays: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """The arrays (each of ``shape``, or broadcastable to it) stacked on a new first axis."""
    stacked = np.asarray(arrays, dtype=float) if all(np.shape(a) == shape for a in arrays) else None
    if stacked is None:
        stacked = np.stack([np.broadcast_to(a, shape) for a in arrays]).astype(float)
    return stacked


def inverse_variance_mean(estimates: Iterable[tuple[np.ndarray, float]]) -> tuple[np.ndarray, float]:
    """GLS of independent unbiased estimates of one vector, each with isotropic variance ``vᵢ``:
    ``(Σ yᵢ/vᵢ)/(Σ 1/vᵢ)`` and its variance ``1/(Σ 1/vᵢ)``."""
    pairs = list(estimates)
    if not pairs:
        raise ValueError("no estimates to combine")
    precision = sum(1.0 / variance for _, variance in pairs)
    combined = sum(np.asarray(value, dtype=float) / variance for value, variance in pairs)
    return np.asarray(combined / precision, dtype=float), 1.0 / precision


# --------------------------------------------------------------------------------------------------
# Exact query variances and recovery masses.
# --------------------------------------------------------------------------------------------------


def _factor_coefficient_squares(factor: Factor, bases: Bases) -> np.ndarray:
    """``G[row, c] = (r_row · (⊗_{a∈scope} U_a)[:, c])²`` over the padded cells of the factor's scope."""
    return _coefficient_squares(factor.block, tuple(bases[a] for a in factor.attributes))


@functools.lru_cache(maxsize=4096)
def _coefficient_squares(block: Block, scope_bases: tuple[AttributeBasis, ...]) -> np.ndarray:
    rows = block.rows
    tensor = block.matrix().reshape((rows,) + tuple(b.size for b in scope_bases))
    for axis, basis in enumerate(scope_bases, start=1):
        tensor = _apply_along(tensor, basis.matrix[: basis.size], axis)
    squares = (tensor**2).reshape(rows, -1)
    squares.setflags(write=False)
    return squares


@functools.lru_cache(maxsize=4096)
def _summed_coefficient_squares(block: Block, scope_bases: tuple[AttributeBasis, ...]) -> np.ndarray:
    summed = _coefficient_squares(block, scope_bases).sum(axis=0)
    summed.setflags(write=False)
    return summed


def product_variances(product: Product, variances: CoefficientVariances, bases: Bases) -> np.ndarray:
    """Exact variance of every (unweighted) query of ``product`` under GLS with the given coefficient
    variances: ``Var(r·M̂_A) = Σ_c Var(β_c) (r·U_A[:, c])²``, contracted factor by factor."""
    return products_variances([product], variances, bases)[0]


def products_variances(products: Sequence[Product], variances: CoefficientVariances, bases: Bases) -> list[np.ndarray]:
    """:func:`product_variances` for many products: products of the same shape (blocks, bases, scope
    order) are contracted together. The variance of the orthonormal coefficient ``β_c = U_Aᵀ M̂_A`` of
    the marginal on ``A`` is ``Var φ_T[c_T] / Π_{a∈A∖T} p_a`` (the GLS covariance of ``M̂_A`` is
    ``U_A diag(·) U_Aᵀ``)."""
    found: list[np.ndarray] = [np.zeros(0)] * len(products)
    for members in _grouped(products, lambda p: (_factor_scopes(p, bases), _scope_order(p))).values():
        first = products[members[0]]
        tensor = _filled([products[i].attributes for i in members], variances, bases, float, multiply=False)
        order = [0] + [1 + i for i in _scope_positions(first)]
        scoped = np.transpose(tensor, order).reshape(
            [len(members)] + [padded_count(f.attributes, bases) for f in first.factors]
        )
        for axis, factor in enumerate(first.factors, start=1):
            scoped = _apply_along(scoped, _factor_coefficient_squares(factor, bases).T, axis)
        for i, values in zip(members, scoped.reshape(len(members), -1)):
            found[i] = values
    return found


def _factor_scopes(product: Product, bases: Bases) -> tuple[tuple[Block, tuple[AttributeBasis, ...]], ...]:
    return tuple((f.block, tuple(bases[a] for a in f.attributes)) for f in product.factors)


def _scope_positions(product: Product) -> tuple[int, ...]:
    """Where each attribute of the factors' scopes (factor by factor) sits among the product's attributes."""
    attributes = product.attributes
    return tuple(attributes.index(a) for f in product.factors for a in f.attributes)


def coefficient_masses(workload: Workload, bases: Bases) -> dict[Subset, np.ndarray]:
    """Recovery mass of the workload on every residual coefficient (weights applied): the expected total
    squared error is ``Σ_T Σ_c mass_T[c] · Var φ̂_T[c]`` for independent coefficient estimates.
    (Cached per workload and bases; the arrays are read-only.)"""
    read = workload.domain.canonical(a for p in workload.products for a in p.attributes)
    return dict(_coefficient_masses(workload, tuple((a, bases[a]) for a in read)))


@functools.lru_cache(maxsize=16)
def _coefficient_masses(workload: Workload, key: tuple[tuple[str, AttributeBasis], ...]) -> dict[Subset, np.ndarray]:
    bases = dict(key)
    masses: dict[Subset, np.ndarray] = {}
    for product in workload.products:
        attributes = product.attributes
        for positions, contribution in _product_masses(product.weight, _factor_scopes(product, bases), _scope_order(product)):
            subset = tuple(attributes[i] for i in positions)
            masses[subset] = masses.get(subset, 0.0) + contribution
    for value in masses.values():
        value.setflags(write=False)
    return masses


def _scope_order(product: Product) -> tuple[int, ...]:
    """Where each of the product's attributes (domain order) sits among its factors' scopes."""
    scope = [a for f in product.factors for a in f.attributes]
    return tuple(scope.index(a) for a in product.attributes)


@functools.lru_cache(maxsize=4096)
def _product_masses(
    weight: float, scopes: tuple[tuple[Block, tuple[AttributeBasis, ...]], ...], order: tuple[int, ...]
) -> tuple[tuple[tuple[int, ...], np.ndarray], ...]:
    """A product's recovery mass on each subset of its attributes, by position among them: it depends
    only on the weight, the blocks and the bases, so products of the same shape (all k-way marginals over
    equal sizes) share one computation."""
    summed = [_summed_coefficient_squares(block, scope_bases) for block, scope_bases in scopes]
    outer = functools.reduce(np.multiply.outer, summed, np.asarray(weight**2))
    padded_sizes = [b.padded for _, scope_bases in scopes for b in scope_bases]
    outer = np.transpose(outer.reshape(padded_sizes), order)
    padded = [padded_sizes[i] for i in order]
    found = []
    for positions in subsets(tuple(range(len(order)))):
        index = tuple(slice(1, None) if i in positions else 0 for i in range(len(order)))
        spread = math.prod(padded[i] for i in range(len(order)) if i not in positions)
        contribution = outer[index] / spread
        contribution.setflags(write=False)
        found.append((positions, contribution))
    return tuple(found)


# --------------------------------------------------------------------------------------------------
# Non-negativity.
# --------------------------------------------------------------------------------------------------

NONNEGATIVE_MAX_CELLS = 2**20  # NNLS works on the marginal over every attribute the workload reads


def _expand_residual(values: np.ndarray, attributes: Subset, subset: Subset, bases: Bases) -> np.ndarray:
    """Adjoint of :func:`residual_of_marginal`: ``(⊗_{a∈T} Q_a ⊗ 1_{A∖T}) values`` over the cells of A."""
    tensor = np.asarray(values, dtype=float)
    for axis, attribute in enumerate(subset):
        tensor = _apply_along(tensor, bases[attribute].residual_matrix.T, axis)
    expanded = np.expand_dims(tensor, [i for i, a in enumerate(attributes) if a not in subset])
    return np.broadcast_to(expanded, tuple(bases[a].size for a in attributes))


def nonnegative_fit(
    attributes: Subset,
    estimates: Mapping[Subset, np.ndarray],
    variances: Mapping[Subset, np.ndarray],
    bases: Bases,
) -> np.ndarray:
    """Non-negative weighted least squares (docs/math.md §3 with ``x ≥ 0``) on the marginal over
    ``attributes``: minimise ``Σ_T Σ_c (φ_T(m)[c] − φ̂_T[c])² / Var φ̂_T[c]`` over ``m ≥ 0`` (L-BFGS-B),
    from the clipped GLS marginal. Subsets with zero variance entries are left out of the fit."""
    from scipy.optimize import Bounds, minimize  # only non-negative answers need it

    shape = tuple(bases[a].size for a in attributes)
    if math.prod(shape) > NONNEGATIVE_MAX_CELLS:
        raise ValueError(
            f"non-negative answers need the {math.prod(shape)}-cell marginal on {attributes};"
            f" at most {NONNEGATIVE_MAX_CELLS} cells are supported — ask for fewer attributes at once"
        )
    fitted = [t for t in estimates if np.all(np.asarray(variances[t]) > 0)]
    precision = {t: 1.0 / np.broadcast_to(variances[t], residual_shape(t, bases)) for t in fitted}
    start = np.clip(marginal_from_residuals(attributes, _complete(attributes, estimates, bases), bases), 0, None)

    def objective(flat: np.ndarray) -> tuple[float, np.ndarray]:
        table = flat.reshape(shape)
        value, gradient = 0.0, np.zeros(shape)
        for subset in fitted:
            difference = residual_of_marginal(table, attributes, subset, bases) - estimates[subset]
            weighted = difference * precision[subset]
            value += float(np.sum(difference * weighted))
            gradient += 2 * _expand_residual(weighted, attributes, subset, bases)
        return value, gradient.ravel()

    result = minimize(objective, start.ravel(), jac=True, method="L-BFGS-B", bounds=Bounds(np.zeros(start.size), np.inf),
                      options={"maxiter": 2000, "ftol": 1e-13, "gtol": 1e-9})
    return result.x.reshape(shape)


def _complete(attributes: Subset, estimates: Mapping[Subset, np.ndarray], bases: Bases) -> dict[Subset, np.ndarray]:
    """The given residual estimates, with zeros for the subsets of ``attributes`` nobody measured."""
    return {t: estimates.get(t, np.zeros(residual_shape(t, bases))) for t in subsets(attributes)}


for _cached in (_coefficient_squares, _summed_coefficient_squares, _coefficient_masses, _product_masses, _outer_row_norms2):
    caches.register(_cached.cache_clear)


CHANGE_TOLERANCE = 1e-6  # smaller moves (and negatives) are floating-point round-off


@dataclass(frozen=True)
class NonNegativityReport:
    """What forcing the answers to come from non-negative counts changed."""

    negative_before: int  # GLS answers below zero
    changed: int  # answers that moved by more than CHANGE_TOLERANCE
    largest_change: float
    total_change: float  # sum of absolute changes over all answers

    @classmethod
    def comparing(cls, gls: Sequence[np.ndarray], fitted: Sequence[np.ndarray]) -> NonNegativityReport:
        """The report for answers ``fitted`` against the GLS answers ``gls`` (same layout); GLS answers
        within ``CHANGE_TOLERANCE`` of zero are round-off, not negative."""
        before = np.concatenate(gls) if len(gls) else np.zeros(0)
        change = np.abs(np.concatenate(fitted) - before) if len(fitted) else np.zeros(0)
        return cls(
            int(np.count_nonzero(before < -CHANGE_TOLERANCE)),
            int(np.count_nonzero(change > CHANGE_TOLERANCE)),
            float(change.max(initial=0.0)),
            float(change.sum()),
        )

    def __str__(self) -> str:
        return (
            f"non-negativity: {self.negative_before} negative GLS answer(s); {self.changed} answer(s) changed,"
            f" by at most {self.largest_change:.4g} (total {self.total_change:.4g})"
        )
