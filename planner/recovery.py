"""Recovery in an orthogonal per-attribute basis: GLS for marginal-type strategies (MATH.md §3, §4).

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
from collections.abc import Iterable, Mapping, Sequence
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

    @property
    def row_norms2(self) -> np.ndarray:
        """Squared norms of the integer rows."""
        return (self.rows.astype(float) ** 2).sum(axis=1)

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
    """A count marginal as int64, refusing non-integral values (noise must go on integer rows)."""
    values = np.asarray(table)
    if np.issubdtype(values.dtype, np.integer):
        return values.astype(np.int64)
    if not np.issubdtype(values.dtype, np.floating) or not np.array_equal(values, np.round(values)):
        raise TypeError(f"the marginal on {attributes} must hold integer counts, got {values.dtype} values")
    return values.astype(np.int64)


def integer_residual(table: np.ndarray, held: Subset, subset: Subset, bases: Bases) -> np.ndarray:
    """``(⊗_{a∈T} rows_a ⊗ 1ᵀ_{B∖T}) y_B`` in exact integer arithmetic: the integer strategy rows of
    subset ``T`` applied to a count marginal on ``held ⊇ T`` (padded cells are structural zeros)."""
    counts = integer_counts(table, held)
    summed = tuple(i for i, a in enumerate(held) if a not in subset)
    tensor = counts.astype(np.int64).sum(axis=summed) if summed else counts.astype(np.int64)
    for axis, attribute in enumerate(subset):
        basis = bases[attribute]
        tensor = _apply_along(tensor, basis.rows[:, : basis.size].T, axis)
    return tensor


def integer_row_norms2(subset: Subset, bases: Bases) -> np.ndarray:
    """Squared norms of the integer rows of subset ``T`` (shape: the residual shape of ``T``)."""
    return functools.reduce(np.multiply.outer, [bases[a].row_norms2 for a in subset], np.asarray(1.0))


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
    shape = tuple(bases[a].padded for a in attributes)
    coefficients = np.zeros(shape)
    for subset in subsets(attributes):
        index = tuple(slice(1, None) if a in subset else 0 for a in attributes)
        scale = 1.0 / math.sqrt(padded_count((a for a in attributes if a not in subset), bases))
        coefficients[index] = scale * residuals[subset]
    for axis, attribute in enumerate(attributes):
        basis = bases[attribute]
        coefficients = _apply_along(coefficients, basis.matrix[: basis.size].T, axis)
    return coefficients


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


def _variance_tensor(attributes: Subset, variances: CoefficientVariances, bases: Bases) -> np.ndarray:
    """Variance of every orthonormal coefficient ``β_c = U_Aᵀ M̂_A`` of the marginal on ``attributes``:
    ``Var φ_T[c_T] / Π_{a∈A∖T} p_a`` (the GLS covariance of ``M̂_A`` is ``U_A diag(·) U_Aᵀ``)."""
    tensor = np.zeros(tuple(bases[a].padded for a in attributes))
    for subset in subsets(attributes):
        index = tuple(slice(1, None) if a in subset else 0 for a in attributes)
        spread = padded_count((a for a in attributes if a not in subset), bases)
        tensor[index] = np.broadcast_to(variances[subset], residual_shape(subset, bases)) / spread
    return tensor


def _contract_factors(product: Product, tensor: np.ndarray, bases: Bases, per_factor: list[np.ndarray]) -> np.ndarray:
    """Contract a tensor over the product's padded attribute cells (domain order) with one matrix per
    factor (``k_f × padded scope cells``), giving a tensor with one axis per factor."""
    attributes = product.attributes
    order = [attributes.index(a) for f in product.factors for a in f.attributes]
    scoped = np.transpose(tensor, order).reshape(
        [padded_count(f.attributes, bases) for f in product.factors]
    )
    for axis, matrix in enumerate(per_factor):
        scoped = _apply_along(scoped, matrix.T, axis)
    return scoped


def product_variances(product: Product, variances: CoefficientVariances, bases: Bases) -> np.ndarray:
    """Exact variance of every (unweighted) query of ``product`` under GLS with the given coefficient
    variances: ``Var(r·M̂_A) = Σ_c Var(β_c) (r·U_A[:, c])²``, contracted factor by factor."""
    tensor = _variance_tensor(product.attributes, variances, bases)
    squares = [_factor_coefficient_squares(f, bases) for f in product.factors]
    return _contract_factors(product, tensor, bases, squares).reshape(-1)


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
        summed = [_summed_coefficient_squares(f.block, tuple(bases[a] for a in f.attributes)) for f in product.factors]
        outer = functools.reduce(np.multiply.outer, summed, np.asarray(product.weight**2))
        scope_order = [a for f in product.factors for a in f.attributes]
        outer = outer.reshape([bases[a].padded for a in scope_order])
        outer = np.transpose(outer, [scope_order.index(a) for a in attributes])
        for subset in subsets(attributes):
            index = tuple(slice(1, None) if a in subset else 0 for a in attributes)
            spread = padded_count((a for a in attributes if a not in subset), bases)
            contribution = outer[index] / spread
            masses[subset] = masses.get(subset, 0.0) + contribution
    for value in masses.values():
        value.setflags(write=False)
    return masses


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
    """Non-negative weighted least squares (MATH.md §3 with ``x ≥ 0``) on the marginal over
    ``attributes``: minimise ``Σ_T Σ_c (φ_T(m)[c] − φ̂_T[c])² / Var φ̂_T[c]`` over ``m ≥ 0`` (L-BFGS-B),
    from the clipped GLS marginal. Subsets with zero variance entries are left out of the fit."""
    from scipy.optimize import minimize  # only non-negative answers need it

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

    result = minimize(objective, start.ravel(), jac=True, method="L-BFGS-B", bounds=[(0, None)] * start.size,
                      options={"maxiter": 2000, "ftol": 1e-13, "gtol": 1e-9})
    return result.x.reshape(shape)


def _complete(attributes: Subset, estimates: Mapping[Subset, np.ndarray], bases: Bases) -> dict[Subset, np.ndarray]:
    """The given residual estimates, with zeros for the subsets of ``attributes`` nobody measured."""
    return {t: estimates.get(t, np.zeros(residual_shape(t, bases))) for t in subsets(attributes)}


for _cached in (_coefficient_squares, _summed_coefficient_squares, _coefficient_masses):
    caches.register(_cached.cache_clear)
