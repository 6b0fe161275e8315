"""Kept measurements, and answering new workloads from them by GLS.

A measurement made by a marginal-type strategy (identity, marginals, residual) describes itself, through
:meth:`planner.Plan.kept_estimates`, as a list of :class:`CoefficientEstimate`: unbiased estimates of
residual coefficients ``φ_T`` in the Helmert basis (``planner.recovery``), one array per attribute subset
``T``, with per-coefficient variances, mutually uncorrelated. A noisy marginal on ``B`` with i.i.d. cell
variance ``v_B`` estimates every ``φ_T, T ⊆ B`` with variance ``v_B Π_{a∈B∖T} n_a`` (docs/math.md §4 in an
orthonormal basis); the residual strategy estimates its coefficients directly. Uncorrelated estimates of
the same coefficient combine by their inverse-variance mean, so the union of every kept measurement —
one linear system — is summarised exactly, per *rows key* and subset ``T``, by the precision-weighted
sum of the estimates and the total precision; GLS over the whole system is the per-coefficient
inverse-variance mean.

Row-space test without the full domain: the measurements span exactly the residual subspaces of the
subsets they estimate, so a workload product lies in their row space iff every subset ``T`` on which it
has non-zero recovery mass has been estimated. Such a product is answered by post-processing.

The *rows key* is opaque to the store: the caller decides which measurements estimate the same data
(dpsql uses the table and the row filter it applies in SQL). The store knows nothing of strategy
classes; a strategy whose coefficients live in another basis simply returns no estimates.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.recovery import (
    NonNegativityReport,
    Subset,
    coefficient_masses,
    helmert_basis,
    marginal_from_residuals,
    nonnegative_fit,
    product_variances,
    residual_shape,
    subsets,
)
from planner.workload import Product, Workload, marginal_for

MASS_TOLERANCE = 1e-12  # recovery mass below this fraction of a product's largest counts as none
MAX_BASIS_SIZE = 4096  # a product reading a larger attribute is never answered here (its Helmert basis is n × n;
# the strategies that keep estimates measure attributes of at most 2048 cells anyway)
RELEVANT_CACHE_SIZE = 4096  # products whose relevant subsets are kept (a pure function of the product)
ANSWERED_CELLS = 1 << 22  # GLS answers kept per rows key between measurements (values; variances beside)


@dataclass(frozen=True)
class CoefficientEstimate:
    """An unbiased estimate of the Helmert residual ``φ_T`` of ``subset`` (axes in ``subset`` order),
    with its per-coefficient variance (an array broadcastable to the estimate's shape)."""

    subset: Subset
    sizes: tuple[int, ...]  # the attributes' domain sizes, in ``subset`` order
    estimate: np.ndarray
    variance: np.ndarray


@dataclass
class _Coefficient:
    """Running sufficient statistic of the estimates of one ``φ_T`` (axes in sorted name order)."""

    weighted_sum: np.ndarray
    precision: np.ndarray  # broadcastable to ``weighted_sum`` (length 1 along the axes every estimate was constant along)

    def add(self, estimate: np.ndarray, variance: np.ndarray) -> None:
        self.weighted_sum = self.weighted_sum + estimate / variance
        self.precision = self.precision + 1.0 / variance

    def mean_and_variance(self) -> tuple[np.ndarray, np.ndarray]:
        variance = 1.0 / self.precision
        return self.weighted_sum * variance, variance


@dataclass
class _Rows:
    sizes: dict[str, int] = field(default_factory=dict)
    coefficients: dict[Subset, _Coefficient] = field(default_factory=dict)
    measurements: int = 0
    answered: dict[Product, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # GLS answers since the last record
    answered_cells: int = 0

    def remember(self, product: Product, found: tuple[np.ndarray, np.ndarray]) -> None:
        """Keep a product's GLS answer until the next measurement (a repeated batch is then answered by
        lookups), while the kept answers hold at most :data:`ANSWERED_CELLS` values."""
        size = int(np.size(found[0]))
        if self.answered_cells + size <= ANSWERED_CELLS:
            self.answered[product] = found
            self.answered_cells += size

    def forget_answers(self) -> None:
        self.answered.clear()
        self.answered_cells = 0


def _compact(variance: np.ndarray) -> np.ndarray:
    """``variance`` with each axis it is constant along by construction (a broadcast: stride 0) kept at length 1:
    one variance for a whole residual is kept as one number, not an array of copies of it."""
    return variance[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in variance.strides)]


def _canonical(subset: Subset) -> tuple[Subset, list[int]]:
    """The subset in sorted name order, and the axis permutation from ``subset`` order to it."""
    order = sorted(range(len(subset)), key=lambda i: subset[i])
    return tuple(subset[i] for i in order), order


@functools.lru_cache(maxsize=RELEVANT_CACHE_SIZE)
def relevant_subsets(product: Product) -> list[Subset]:
    """Subsets of the product's attributes on which it has non-zero recovery mass (Helmert basis)."""
    domain = product.domain
    bases = {a: helmert_basis(domain.size_of(a)) for a in product.attributes}
    masses = coefficient_masses(Workload(domain, (product,)), bases)
    totals = {t: float(np.sum(m)) for t, m in masses.items()}
    largest = max(totals.values(), default=0.0)
    return [t for t, m in totals.items() if largest > 0 and m > MASS_TOLERANCE * largest]


class MeasurementStore:
    """Kept measurements, per rows key, as combined residual-coefficient estimates."""

    def __init__(self) -> None:
        self._rows: dict[Hashable, _Rows] = {}

    def forget(self, matches: object) -> None:
        """Drop every rows key for which ``matches(key)`` is true (the data behind them changed)."""
        for key in [k for k in self._rows if matches(k)]:  # type: ignore[operator]
            del self._rows[key]

    def measurement_count(self, rows: Hashable) -> int:
        kept = self._rows.get(rows)
        return 0 if kept is None else kept.measurements

    def record(self, rows: Hashable, estimates: Sequence[CoefficientEstimate]) -> None:
        """Keep one measurement's estimates. An attribute whose size differs from what was kept under
        the same rows key means the domain changed: what was kept is dropped first."""
        kept = self._rows.setdefault(rows, _Rows())
        sizes = {a: n for e in estimates for a, n in zip(e.subset, e.sizes)}
        if any(kept.sizes.get(a, n) != n for a, n in sizes.items()):
            kept = self._rows[rows] = _Rows()
        kept.sizes.update(sizes)
        kept.forget_answers()
        for item in estimates:
            key, order = _canonical(item.subset)
            estimate = np.transpose(np.asarray(item.estimate, dtype=float), order)
            variance = _compact(np.transpose(np.broadcast_to(np.asarray(item.variance, dtype=float), item.estimate.shape), order))
            if key in kept.coefficients:
                kept.coefficients[key].add(estimate, variance)
            else:
                kept.coefficients[key] = _Coefficient(estimate / variance, 1.0 / variance)
        kept.measurements += 1

    def _compatible(self, kept: _Rows, product: Product) -> bool:
        domain = product.domain
        return all(kept.sizes.get(a, domain.size_of(a)) == domain.size_of(a) for a in product.attributes)

    def covered(self, rows: Hashable, workload: Workload) -> tuple[bool, ...]:
        """Per product: whether it lies in the row space of what was kept under ``rows``."""
        kept = self._rows.get(rows)
        if kept is None:
            return (False,) * len(workload.products)
        return tuple(
            p in kept.answered  # answered since the last measurement: covered (a repeated batch asks only this)
            or (
                self._compatible(kept, p)
                and all(workload.domain.size_of(a) <= MAX_BASIS_SIZE for a in p.attributes)
                and all(_canonical(t)[0] in kept.coefficients for t in relevant_subsets(p))
            )
            for p in workload.products
        )

    def answer(self, rows: Hashable, workload: Workload, products: Iterable[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """GLS answers (unweighted values, variances) of covered products from what was kept."""
        chosen = tuple(products)
        if not chosen:
            return {}
        kept = self._rows[rows]
        answers = {}
        for index in chosen:
            product = workload.products[index]
            found = kept.answered.get(product)
            if found is None:
                found = self._answer_product(product, kept)
                kept.remember(product, found)
            answers[index] = found
        return answers

    def estimates(self, rows: Hashable, attributes: Subset) -> tuple[dict[Subset, np.ndarray], dict[Subset, np.ndarray]]:
        """The combined estimate and its variance of every kept ``φ_T`` with ``T ⊆ attributes`` (axes in
        ``attributes`` order), for fits over everything kept (non-negative answers)."""
        kept = self._rows[rows]
        estimates: dict[Subset, np.ndarray] = {}
        variances: dict[Subset, np.ndarray] = {}
        for subset in subsets(attributes):
            key, order = _canonical(subset)
            if key in kept.coefficients:
                back = np.argsort(order)
                mean, variance = kept.coefficients[key].mean_and_variance()
                estimates[subset], variances[subset] = np.transpose(mean, back), np.transpose(variance, back)
        return estimates, variances

    def answer_nonnegative(
        self, rows: Hashable, workload: Workload, gls: Sequence[np.ndarray]
    ) -> tuple[tuple[np.ndarray, ...], NonNegativityReport]:
        """Answers to every product of ``workload`` from the non-negative least-squares fit
        (``planner.recovery.nonnegative_fit``) on everything kept under ``rows`` over the workload's
        attributes, and what that changed against the GLS answers ``gls``. Raises ``ValueError`` when
        the fit cannot run (too many cells); the caller keeps GLS's answers then."""
        domain = workload.domain
        union = domain.canonical(a for p in workload.products for a in p.attributes)
        bases = {a: helmert_basis(domain.size_of(a)) for a in union}
        estimates, variances = self.estimates(rows, union)
        fitted = nonnegative_fit(union, estimates, variances, bases)
        values = tuple(p.unweighted_answer(marginal_for(domain, {union: fitted}, p.attributes)) for p in workload.products)
        return values, NonNegativityReport.comparing(gls, values)

    @staticmethod
    def _answer_product(product: Product, kept: _Rows) -> tuple[np.ndarray, np.ndarray]:
        domain = product.domain
        bases = {a: helmert_basis(domain.size_of(a)) for a in product.attributes}
        relevant = set(relevant_subsets(product))
        residuals: dict[Subset, np.ndarray] = {}
        variances: dict[Subset, np.ndarray] = {}
        for subset in subsets(product.attributes):
            if subset not in relevant:
                shape = residual_shape(subset, bases)
                residuals[subset], variances[subset] = np.zeros(shape), np.zeros(shape)
                continue
            key, order = _canonical(subset)
            back = np.argsort(order)
            mean, variance = kept.coefficients[key].mean_and_variance()
            residuals[subset], variances[subset] = np.transpose(mean, back), np.transpose(variance, back)
        values = product.unweighted_answer(marginal_from_residuals(product.attributes, residuals, bases))
        return values, product_variances(product, variances, bases)
