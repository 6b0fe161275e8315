"""Strategies whose GLS is diagonal in a per-attribute orthogonal basis, and the residual strategy.

:class:`CoefficientCandidate` is the shared machinery of the marginal-type families (identity,
marginals, Fourier, residual): they all produce independent estimates of residual coefficients ``φ_T``
(``planner.recovery``), so exact query variances and consistent answers come from the same code.

:class:`DirectCoefficientCandidate` measures every needed coefficient once, as an integer row (Helmert
contrasts or ±1 Hadamard rows) with its own discrete noise. With Helmert rows and one budget per
attribute subset ``T`` it is the *residual* strategy (Gaussian only): each row ``r`` of ``T`` gets noise
``σ_T²‖r‖²``, so every orthonormal coefficient of ``T`` has variance ``σ_T²``; its zCDP cost is
``k² Π_{a∈T}(1 − 1/n_a) / (2σ_T²)``, the same for every data cell, so §2's Gaussian closed form with
``C_T² = Π_{a∈T}(1 − 1/n_a)`` gives the optimal ``σ_T``. For a marginal workload this reaches the SVD
bound (docs/math.md §7) exactly: ``(WᵀW)^{1/2}`` is diagonal in the residual basis.
"""

from __future__ import annotations

import functools
import math
from abc import abstractmethod
from collections.abc import Mapping, Sequence

import numpy as np

from planner.budget import Sensitivity, discrete_variance, sample_noise, continuous_laplace_variance, optimal_budgets
from planner.privacy import Privacy
from planner.recovery import (
    AttributeBasis,
    Bases,
    NonNegativityReport,
    Subset,
    coefficient_masses,
    downward_closure,
    first_containing,
    helmert_basis,
    integer_residuals,
    integer_row_norms2,
    marginals_from_residuals,
    nonnegative_fit,
    products_variances,
    subsets,
)
from planner.store import CoefficientEstimate
from planner.strategies.base import Answers, Candidate, GroupBudget, Measurement
from planner.workload import Workload, marginal_for

MAX_MARGINAL_CELLS = 2**26  # a strategy needing a larger marginal is not offered
MASS_TOLERANCE = 1e-12  # recovery mass below this fraction of the largest counts as none
ANSWER_MAP_VALUES = 64  # measurements of at most this many values ...
ANSWER_MAP_ROWS = 4096  # ... with at most this many answers, are answered by one matrix product
Layout = tuple[tuple[str, tuple[int, ...]], ...]  # a measurement's value names and shapes, in order


def maximal_sets(attribute_sets: tuple[Subset, ...]) -> tuple[Subset, ...]:
    """The attribute sets not contained in another one of the list (order kept)."""
    unique = tuple(dict.fromkeys(attribute_sets))
    closure_of_larger = {s for a in unique for s in subsets(a) if s != a}
    return tuple(a for a in unique if a not in closure_of_larger)


def subset_name(subset: Subset) -> str:
    return "(" + ", ".join(subset) + ")" if subset else "(total)"


class CoefficientCandidate(Candidate):
    """A candidate whose recovery rebuilds marginals from independent residual estimates.

    ``consistent`` is False when a basis pads an attribute the workload reads: answers are then
    consistent over the padded cells but not over the real ones (the selector does not choose it)."""

    def __init__(self, name: str, workload: Workload, privacy: Privacy, sensitivity: Sensitivity, bases: Bases) -> None:
        self.name = name
        self._workload = workload
        self._privacy = privacy
        self.sensitivity = sensitivity
        self.bases = bases
        self.needed = downward_closure(p.attributes for p in workload.products)
        read = {a for p in workload.products for a in p.attributes}
        self.consistent = all(bases[a].padded == bases[a].size for a in read)
        self._answer_maps: dict[Layout, np.ndarray] = {}  # small measurement layouts → their answer matrix

    @property
    def workload(self) -> Workload:
        return self._workload

    @functools.cached_property
    def masses(self) -> Mapping[Subset, np.ndarray]:
        """The workload's recovery mass on every residual coefficient (``planner.recovery``)."""
        return coefficient_masses(self.workload, self.bases)

    @functools.cached_property
    def relevant(self) -> frozenset[Subset]:
        """Needed subsets on which the workload has non-zero recovery mass (others never affect answers)."""
        totals = {t: float(np.sum(self.masses[t])) for t in self.needed}
        largest = max(totals.values())
        return frozenset(t for t, m in totals.items() if m > MASS_TOLERANCE * largest)

    @property
    def privacy(self) -> Privacy:
        return self._privacy

    @abstractmethod
    def coefficient_variances(self, continuous: bool = False) -> Mapping[Subset, np.ndarray]:
        """Variance of the GLS estimate of every needed residual coefficient (exact discrete noise, or
        the papers' continuous ``2b²`` / ``σ²`` when ``continuous``)."""

    @abstractmethod
    def residuals(self, measurement: Measurement) -> Mapping[Subset, np.ndarray]:
        """GLS estimates of every needed residual ``φ_T`` from a measurement."""

    @abstractmethod
    def dense_strategy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(S, parameters, variances)`` over the full *padded* domain (padded cells last in each
        attribute; no padding for Helmert bases): the measured integer rows, each row's noise parameter
        (Laplace scale or Gaussian σ²) and exact noise variance. Small domains only (tests check privacy
        and GLS error against it). Recovery is GLS in this padded domain: structural zeros are not used."""

    def dense_workload(self) -> np.ndarray:
        """The unweighted workload over the same padded columns as :meth:`dense_strategy`: a product's
        own attributes get zero columns for padded cells, summed-out attributes sum over padded cells
        too (the same queries, since padded cells hold no data)."""
        domain = self.workload.domain
        padded_shape = tuple(self.bases[a].padded for a in domain.attributes)
        blocks = []
        for product in self.workload.products:
            own = product.attributes
            dense = product.matrix_on(own).reshape((product.rows,) + domain.shape(own))
            tensor = np.zeros((product.rows,) + tuple(self.bases[a].padded for a in own))
            tensor[(slice(None),) + tuple(slice(0, n) for n in domain.shape(own))] = dense
            missing = [1 + i for i, a in enumerate(domain.attributes) if a not in own]
            tensor = np.broadcast_to(np.expand_dims(tensor, missing), (product.rows,) + padded_shape)
            blocks.append(tensor.reshape(product.rows, -1))
        return np.vstack(blocks)

    @functools.cached_property
    def exact_coefficient_variances(self) -> Mapping[Subset, np.ndarray]:
        return self.coefficient_variances(continuous=False)

    @functools.cached_property
    def _query_variances(self) -> tuple[np.ndarray, ...]:
        return self.query_variances_for(continuous=False)

    def query_variances_for(self, continuous: bool) -> tuple[np.ndarray, ...]:
        variances = self.coefficient_variances(True) if continuous else self.exact_coefficient_variances
        return tuple(products_variances(self.workload.products, variances, self.bases))

    def query_variances(self) -> tuple[np.ndarray, ...]:
        return self._query_variances

    def expected_error(self, continuous: bool = False) -> float:
        """Expected total squared error, ``Σ_T Σ_c mass_T[c] Var φ̂_T[c]`` (equal to the weighted sum of
        :meth:`query_variances`); ``continuous=True`` uses continuous-noise variances (2b², σ²)."""
        variances = self.coefficient_variances(True) if continuous else self.exact_coefficient_variances
        return float(sum(np.sum(self.masses[t] * variances[t]) for t in self.needed))

    def in_helmert_basis(self) -> bool:
        """Whether every attribute uses the (unpadded) Helmert basis that ``planner.store`` keeps — itself, or a basis
        equal to it: on an attribute of two cells the Fourier (Hadamard) basis is the Helmert basis, so a Fourier
        measurement of binary attributes is kept like a marginal one."""
        domain = self.workload.domain
        return all(_same_basis(self.bases[a], helmert_basis(domain.size_of(a))) for a in domain.attributes)

    def kept_estimates(self, measurement: Measurement) -> tuple[CoefficientEstimate, ...] | None:
        """The GLS estimate of every coefficient this measurement estimates (relevant subsets)."""
        if not self.in_helmert_basis():
            return None
        domain = self.workload.domain
        residuals = self.residuals(measurement)
        variances = self.exact_coefficient_variances
        return tuple(
            CoefficientEstimate(t, domain.shape(t), np.asarray(residuals[t], dtype=float), np.asarray(variances[t], dtype=float))
            for t in self.needed
            if t in self.relevant and np.all(np.asarray(variances[t]) > 0)
        )

    def answer(self, measurement: Measurement) -> Answers:
        if measurement.strategy != self.name:
            raise ValueError(f"measurement was made by strategy {measurement.strategy!r}, not {self.name!r}")
        mapped = self._mapped_answers(measurement)
        return Answers(self._gls_answers(measurement) if mapped is None else mapped, self.query_variances())

    def _gls_answers(self, measurement: Measurement) -> tuple[np.ndarray, ...]:
        residuals = self.residuals(measurement)
        products = self.workload.products
        marginals = marginals_from_residuals([p.attributes for p in products], residuals, self.bases)
        return tuple(p.unweighted_answer(m) for p, m in zip(products, marginals))

    def _mapped_answers(self, measurement: Measurement) -> tuple[np.ndarray, ...] | None:
        """The GLS answers as one matrix product, for a small measurement (None for a large one).

        GLS is linear in the measured values (the variances that weight it are the plan's own), so the
        map from the values, flattened in the measurement's order, to the answers is a matrix whose
        column j answers the measurement that is 1 at value j and 0 elsewhere. A plan is kept for later
        statements (``dpsql``'s session memoises it): the first measurement of a layout builds the
        matrix, at most ``ANSWER_MAP_VALUES`` values (one GLS each) by ``ANSWER_MAP_ROWS`` answers, and
        every later one costs one product instead of the residual transforms' dozens of array calls.
        Every measurement of the layout goes through the matrix, so equal measurements give bit-equal
        answers.
        """
        layout = tuple((name, np.shape(values)) for name, values in measurement.values.items())
        sizes = [math.prod(shape) for _, shape in layout]
        rows = [p.rows for p in self.workload.products]
        if sum(sizes) > ANSWER_MAP_VALUES or sum(rows) > ANSWER_MAP_ROWS:
            return None
        matrix = self._answer_maps.get(layout)
        if matrix is None:
            matrix = self._answer_maps[layout] = self._answer_matrix(measurement, layout, sum(sizes))
        flat = np.concatenate([np.asarray(v, dtype=float).ravel() for v in measurement.values.values()])
        return tuple(np.split(matrix @ flat, np.cumsum(rows)[:-1]))

    def _answer_matrix(self, measurement: Measurement, layout: Layout, size: int) -> np.ndarray:
        columns = []
        for j in range(size):
            unit = np.zeros(size)
            unit[j] = 1.0
            pieces = np.split(unit, np.cumsum([math.prod(shape) for _, shape in layout])[:-1])
            values = {name: piece.reshape(shape) for (name, shape), piece in zip(layout, pieces)}
            basis = Measurement(measurement.strategy, values, measurement.variances, measurement.privacy, measurement.metadata)
            columns.append(np.concatenate([np.ravel(a) for a in self._gls_answers(basis)]))
        return np.stack(columns, axis=1)


def nonnegative_answer(candidate: CoefficientCandidate, measurement: Measurement) -> tuple[Answers, NonNegativityReport]:
    """Answers from the non-negative least-squares fit (``planner.recovery.nonnegative_fit``) on the
    marginal over every attribute the workload reads, and a report of what changed against GLS. The
    variances returned are GLS's: NNLS answers are biased, their error is at most GLS's in the fitted
    norm but has no closed form."""
    gls = candidate.answer(measurement)
    union = candidate.workload.domain.canonical(a for p in candidate.workload.products for a in p.attributes)
    variances = candidate.exact_coefficient_variances
    estimates = candidate.residuals(measurement)
    fitted = nonnegative_fit(union, {t: estimates[t] for t in candidate.relevant}, variances, candidate.bases)
    values = tuple(p.unweighted_answer(marginal_for(candidate.workload.domain, {union: fitted}, p.attributes))
                   for p in candidate.workload.products)
    return Answers(values, gls.variances), NonNegativityReport.comparing(gls.values, values)


def _noise_variances(family: str, parameters: np.ndarray, continuous: bool) -> np.ndarray:
    if family == "laplace":
        return continuous_laplace_variance(parameters) if continuous else discrete_variance(family, parameters)
    return np.asarray(parameters, dtype=float) if continuous else discrete_variance(family, parameters)


def _row_noise_variances(
    family: str, parameters: Mapping[Subset, np.ndarray], order: Sequence[Subset], continuous: bool
) -> dict[Subset, np.ndarray]:
    """The noise variance of every row of every subset (0 where the parameter is NaN: not measured),
    from one vectorized call over all subsets."""
    flat = np.concatenate([np.ravel(parameters[t]) for t in order]) if order else np.zeros(0)
    measured = np.isfinite(flat)
    variance = np.zeros(flat.size)
    if measured.any():
        variance[measured] = _noise_variances(family, flat[measured], continuous)
    ends = np.cumsum([np.size(parameters[t]) for t in order])
    return {t: piece.reshape(np.shape(parameters[t])) for t, piece in zip(order, np.split(variance, ends[:-1]))}


class DirectCoefficientCandidate(CoefficientCandidate):
    """Measure each needed coefficient of ``T`` once: integer row ``r`` plus discrete noise with the
    per-row parameter ``parameters[T]`` (Laplace scale or Gaussian σ², already scaled for ``r``).
    Coefficients with zero recovery mass (``parameters`` NaN) are not measured and estimated as 0."""

    def __init__(
        self,
        name: str,
        workload: Workload,
        privacy: Privacy,
        sensitivity: Sensitivity,
        bases: Bases,
        parameters: Mapping[Subset, np.ndarray],
        groups: tuple[GroupBudget, ...],
    ) -> None:
        super().__init__(name, workload, privacy, sensitivity, bases)
        self.parameters = dict(parameters)
        self._groups = groups
        self._norms2 = {t: integer_row_norms2(t, bases) for t in self.needed}
        self._required = maximal_sets(tuple(p.attributes for p in workload.products))
        self._sources = {t: self._required[i] for t, i in first_containing(self.needed, self._required).items()}

    def group_budgets(self) -> tuple[GroupBudget, ...]:
        return self._groups

    def required_marginals(self) -> tuple[Subset, ...]:
        return self._required

    def coefficient_variances(self, continuous: bool = False) -> dict[Subset, np.ndarray]:
        family = "laplace" if self.privacy.is_laplace else "gaussian"
        noise = _row_noise_variances(family, self.parameters, self.needed, continuous)
        return {t: noise[t] / self._norms2[t] for t in self.needed}

    def measure(self, marginals: Mapping[Subset, np.ndarray], rng: object = None, noise: bool = True) -> Measurement:
        tables = {held: marginal_for(self.workload.domain, marginals, held) for held in self._required}
        requests = [(tables[self._sources[t]], self._sources[t], t) for t in self.needed]
        exact_rows = {}
        for subset, rows in zip(self.needed, integer_residuals(requests, self.bases)):
            rows = np.array(rows, dtype=np.int64)
            rows[~np.isfinite(self.parameters[subset])] = 0  # not measured: never released
            exact_rows[subset] = rows
        if noise:
            measured = {t: np.isfinite(self.parameters[t]) for t in self.needed}
            drawn = sample_noise(self.privacy, np.concatenate([self.parameters[t][measured[t]] for t in self.needed]), rng)
            offset = 0
            for subset in self.needed:
                count = int(measured[subset].sum())
                exact_rows[subset][measured[subset]] += drawn[offset : offset + count]
                offset += count
        variances = self.exact_coefficient_variances
        return Measurement(
            self.name,
            {subset_name(t): exact_rows[t] for t in self.needed},
            {subset_name(t): variances[t] * self._norms2[t] for t in self.needed},
            self.privacy,
        )

    def dense_strategy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        domain = self.workload.domain
        rows, parameters = [], []
        for subset in self.needed:
            factors = [
                self.bases[a].rows if a in subset else np.ones((1, self.bases[a].padded))
                for a in domain.attributes
            ]
            matrix = functools.reduce(np.kron, factors, np.ones((1, 1)))
            measured = np.isfinite(self.parameters[subset]).ravel()
            rows.append(matrix[measured])
            parameters.append(self.parameters[subset].ravel()[measured])
        parameter = np.concatenate(parameters)
        family = "laplace" if self.privacy.is_laplace else "gaussian"
        return np.vstack(rows), parameter, np.asarray(_noise_variances(family, parameter, False), dtype=float)

    def residuals(self, measurement: Measurement) -> dict[Subset, np.ndarray]:
        return {
            t: np.asarray(measurement.values[subset_name(t)], dtype=float) / np.sqrt(self._norms2[t])
            for t in self.needed
        }


def residual_candidate(workload: Workload, privacy: Privacy, sensitivity: Sensitivity) -> DirectCoefficientCandidate:
    """The residual strategy with optimal per-subset Gaussian budgets (requires zCDP)."""
    domain = workload.domain
    bases = {a: helmert_basis(domain.size_of(a)) for a in domain.attributes}
    masses = coefficient_masses(workload, bases)
    needed = downward_closure(p.attributes for p in workload.products)
    mass = np.array([float(np.sum(masses[t])) for t in needed])
    spread = np.array([math.prod(1 - 1 / domain.size_of(a) for a in t) for t in needed])
    distinct = sensitivity.rows if sensitivity.distinct_cells else math.inf
    squared_magnitude = np.minimum(sensitivity.rows**2 * spread, distinct)  # k² C_T² per §2
    active = mass > MASS_TOLERANCE * mass.max()
    budgets = np.zeros(len(needed))
    budgets[active] = optimal_budgets(mass[active], np.sqrt(squared_magnitude[active]), privacy)
    parameters = {}
    for subset, rho, c2 in zip(needed, budgets, squared_magnitude):
        norms2 = integer_row_norms2(subset, bases)
        parameters[subset] = np.full(norms2.shape, np.nan) if rho == 0 else c2 / (2 * rho) * norms2  # σ_T² ‖r‖²
    noise = _row_noise_variances("gaussian", parameters, needed, continuous=False)
    groups = tuple(
        GroupBudget(f"residual {subset_name(t)} (variance per unit-norm row)", int(np.size(noise[t])), float(rho),
                    float(np.mean(noise[t] / integer_row_norms2(t, bases))))
        for t, rho in zip(needed, budgets) if rho != 0
    )
    return DirectCoefficientCandidate("residual", workload, privacy, sensitivity, bases, parameters, groups)


def candidates(workload: Workload, privacy: Privacy, contributions: int, distinct_cells: bool = False) -> list[Candidate]:
    """The residual strategy, for zCDP workloads whose marginals are small enough to handle."""
    if privacy.is_laplace:
        return []
    if any(_cells(workload, p.attributes) > MAX_MARGINAL_CELLS for p in workload.products):
        return []
    return [residual_candidate(workload, privacy, Sensitivity(contributions, distinct_cells))]


def _cells(workload: Workload, attributes: Subset) -> int:
    return math.prod(workload.domain.shape(attributes))


def _same_basis(basis: AttributeBasis, other: AttributeBasis) -> bool:
    """The same orthonormal basis: the same cells, padding and integer rows."""
    return basis is other or (basis.size == other.size and basis.padded == other.padded and np.array_equal(basis.rows, other.rows))
