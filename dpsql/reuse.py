"""The connection's store of released measurements, and answering new workloads from it for free.

Every measurement dpsql releases through a marginal-type plan is, in the Helmert residual basis of
``planner.recovery``, a set of *independent* unbiased estimates of residual coefficients ``φ_T`` (one
vector per attribute subset ``T`` of a table's columns) with known per-coefficient variances: a noisy
marginal on ``B`` with i.i.d. cell variance ``v_B`` estimates every ``φ_T, T ⊆ B`` with variance
``v_B Π_{a∈B∖T} n_a`` (MATH.md §4 in an orthonormal basis), and the residual strategy measures
coefficients directly. Independent estimates of the same coefficient combine by their inverse-variance
mean, so the union of all released measurements — one linear system — is summarised exactly by, per
table and subset ``T``, the precision-weighted sum of estimates and the total precision. GLS over the
whole system is then the per-coefficient inverse-variance mean (``planner.recovery.inverse_variance_mean``).

Row-space test, without the full domain: the measurements span exactly the residual subspaces of the
subsets they estimate, so a workload product lies in their row space iff every subset ``T`` on which it
has non-zero recovery mass has been estimated. Such a product is answered from the store by post-
processing (zero privacy cost); the others must be measured (and the new measurement then joins the store).

Measurements are kept for the lifetime of the connection and only for the rows they were made on: the
table and the columns whose domain tests decide the counted rows (``Table.counted_columns``: every
column with a declared domain, plus a released key set the statement groups by; see
``dpsql.schema.OUT_OF_DOMAIN_RULE``). Statements over declared columns all count the same rows and share
one store; a statement grouping by released keys counts fewer rows and has its own.
Answering from them is on by default; ``dpsql.connect(..., reuse=False)`` measures every statement afresh.
Strategies whose coefficients live in another basis (the padded Fourier/Hadamard family) are not kept.
Every measurement bounds contributions with its own random choice of each unit's rows, so combining two
of them estimates the average of two (equally valid) bounded tables; when no unit exceeds its bound they
are the same table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from planner import Plan, Product, Workload
from planner.recovery import (
    Subset,
    coefficient_masses,
    helmert_basis,
    marginal_from_residuals,
    product_variances,
    residual_of_marginal,
    residual_shape,
    subsets,
)
from planner.strategies.base import Answers, Measurement
from planner.strategies.marginals import MarginalsCandidate, marginal_name
from planner.strategies.residual import MASS_TOLERANCE, CoefficientCandidate


@dataclass
class _Coefficient:
    """Running sufficient statistic of the estimates of one residual ``φ_T`` (axes in sorted name order)."""

    weighted_sum: np.ndarray
    precision: np.ndarray

    def add(self, estimate: np.ndarray, variance: np.ndarray) -> None:
        self.weighted_sum = self.weighted_sum + estimate / variance
        self.precision = self.precision + 1.0 / variance


@dataclass
class _TableStore:
    sizes: dict[str, int] = field(default_factory=dict)
    coefficients: dict[Subset, _Coefficient] = field(default_factory=dict)
    measurements: int = 0


def _canonical(subset: Subset) -> tuple[Subset, list[int]]:
    """The subset in sorted name order, and the axis permutation from ``subset`` order to it."""
    order = sorted(range(len(subset)), key=lambda i: subset[i])
    return tuple(subset[i] for i in order), order


RowsKey = tuple[str, frozenset[str]]


def _rows_key(table: str, columns: Iterable[str]) -> RowsKey:
    """The rows a statement counts: its table, and every column it mentions (see the module doc)."""
    return table.lower(), frozenset(columns)


class MeasurementStore:
    """Released measurements of one connection, per counted rows (table and counted columns), as
    combined residual-coefficient estimates."""

    def __init__(self) -> None:
        self._rows: dict[RowsKey, _TableStore] = {}

    def forget(self, table: str) -> None:
        """Drop what was kept for ``table`` (it was re-registered: new data)."""
        for key in [k for k in self._rows if k[0] == table.lower()]:
            del self._rows[key]

    def measurement_count(self, table: str, columns: Iterable[str]) -> int:
        store = self._rows.get(_rows_key(table, columns))
        return 0 if store is None else store.measurements

    # -- recording ------------------------------------------------------------------------------------
    def record(self, table: str, columns: Iterable[str], plan: Plan, measurement: Measurement) -> bool:
        """Keep a measurement released on the rows of ``table`` valid in ``columns`` (every column its
        statement mentions); False when its strategy's basis cannot be kept (see module doc)."""
        candidate = plan.candidate
        domain = candidate.workload.domain
        if not isinstance(candidate, CoefficientCandidate):
            return False
        if any(candidate.bases[a] is not helmert_basis(domain.size_of(a)) for a in domain.attributes):
            return False
        bases = candidate.bases
        estimates: list[tuple[Subset, np.ndarray, np.ndarray]] = []
        if isinstance(candidate, MarginalsCandidate):
            for held, noise in zip(candidate.measured, candidate.noises):
                table_values = np.asarray(measurement.values[marginal_name(held)], dtype=float)
                for subset in subsets(held):
                    spread = float(np.prod(domain.shape(a for a in held if a not in subset)))
                    estimate = residual_of_marginal(table_values, held, subset, bases)
                    estimates.append((subset, estimate, np.full(estimate.shape, noise.variance * spread)))
        else:
            residuals = candidate.residuals(measurement)
            variances = candidate.coefficient_variances()
            for subset in candidate.relevant:
                variance = np.broadcast_to(variances[subset], residual_shape(subset, bases))
                estimates.append((subset, np.asarray(residuals[subset], dtype=float), np.asarray(variance, dtype=float)))
        key = _rows_key(table, columns)
        store = self._rows.setdefault(key, _TableStore())
        if any(store.sizes.get(a, domain.size_of(a)) != domain.size_of(a) for a in domain.attributes):
            store = self._rows[key] = _TableStore()  # the table's domains changed: start afresh
        store.sizes.update(domain.as_dict())
        for subset, estimate, variance in estimates:
            key, order = _canonical(subset)
            estimate, variance = np.transpose(estimate, order), np.transpose(variance, order)
            if key in store.coefficients:
                store.coefficients[key].add(estimate, variance)
            else:
                store.coefficients[key] = _Coefficient(estimate / variance, 1.0 / variance)
        store.measurements += 1
        return True

    # -- answering ------------------------------------------------------------------------------------
    def covered(self, table: str, columns: Iterable[str], workload: Workload) -> tuple[bool, ...]:
        """Per product: whether it lies in the row space of what was kept for the same rows."""
        store = self._rows.get(_rows_key(table, columns))
        return tuple(
            store is not None and all(_canonical(t)[0] in store.coefficients for t in _relevant(p)) for p in workload.products
        )

    def answer(
        self, table: str, columns: Iterable[str], workload: Workload, products: tuple[int, ...] | None = None
    ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """GLS answers (unweighted values, variances) of the chosen covered products from the store."""
        store = self._rows[_rows_key(table, columns)]
        chosen = range(len(workload.products)) if products is None else products
        answers = {}
        for index in chosen:
            product = workload.products[index]
            answers[index] = _answer_product(product, store)
        return answers

    def answers(self, table: str, columns: Iterable[str], workload: Workload) -> Answers:
        """Every product answered from the store (all must be covered)."""
        found = self.answer(table, columns, workload)
        return Answers(tuple(found[i][0] for i in range(len(found))), tuple(found[i][1] for i in range(len(found))))

    def estimates(
        self, table: str, columns: Iterable[str], attributes: Subset
    ) -> tuple[dict[Subset, np.ndarray], dict[Subset, np.ndarray]]:
        """The combined estimate and its variance of every kept ``φ_T`` with ``T ⊆ attributes`` (axes in
        ``attributes`` order), for fits over the whole store such as ``dpsql.nonnegative``."""
        store = self._rows[_rows_key(table, columns)]
        estimates: dict[Subset, np.ndarray] = {}
        variances: dict[Subset, np.ndarray] = {}
        for subset in subsets(attributes):
            key, order = _canonical(subset)
            if key in store.coefficients:
                kept, back = store.coefficients[key], np.argsort(order)
                variance = 1.0 / kept.precision
                estimates[subset] = np.transpose(kept.weighted_sum * variance, back)
                variances[subset] = np.transpose(variance, back)
        return estimates, variances


def _relevant(product: Product) -> list[Subset]:
    """Subsets of the product's attributes on which it has non-zero recovery mass (Helmert basis)."""
    domain = product.domain
    bases = {a: helmert_basis(domain.size_of(a)) for a in product.attributes}
    masses = coefficient_masses(Workload(domain, (product,)), bases)
    totals = {t: float(np.sum(m)) for t, m in masses.items()}
    largest = max(totals.values(), default=0.0)
    return [t for t, m in totals.items() if largest > 0 and m > MASS_TOLERANCE * largest]


def _answer_product(product: Product, store: _TableStore) -> tuple[np.ndarray, np.ndarray]:
    domain = product.domain
    bases = {a: helmert_basis(domain.size_of(a)) for a in product.attributes}
    relevant = set(_relevant(product))
    residuals: dict[Subset, np.ndarray] = {}
    variances: dict[Subset, np.ndarray] = {}
    for subset in subsets(product.attributes):
        shape = residual_shape(subset, bases)
        if subset not in relevant:
            residuals[subset], variances[subset] = np.zeros(shape), np.zeros(shape)
            continue
        key, order = _canonical(subset)
        kept = store.coefficients[key]
        back = np.argsort(order)
        variance = 1.0 / kept.precision
        residuals[subset] = np.transpose(kept.weighted_sum * variance, back)
        variances[subset] = np.transpose(variance, back)
    values = product.unweighted_answer(marginal_from_residuals(product.attributes, residuals, bases))
    return values, product_variances(product, variances, bases)
