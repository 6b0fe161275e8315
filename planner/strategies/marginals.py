"""Strategies that measure a set of marginals, each with its own budget, answered by GLS.

Each measured marginal ``B`` is one group of §2 (``C = 1``): a privacy unit's rows land in at most
``k`` of its cells. With i.i.d. per-cell noise ``v_B``, the GLS estimate of every residual coefficient of
``T`` is the inverse-variance mean over measured ``B ⊇ T`` (``planner.recovery``), with variance

    V_T = 1 / Σ_{B ⊇ T} 1 / (v_B Π_{a∈B∖T} n_a).

The workload's error is ``E = Σ_T c_T V_T`` (``c_T`` = its recovery mass on ``T``), and the recovery mass
of group ``B`` under GLS is ``a_B = ∂E/∂v_B = Σ_{T⊆B} c_T V_T² / (v_B² Π_{B∖T} n_a)``. Budgets alternate
with GLS (MATH.md §3): closed-form budgets for the current masses, then GLS masses for those budgets.
Each step minimises an upper bound of ``E`` that is tight at the current point (GLS is the best recovery
for any budgets), so the error never rises; for zCDP a fixed point satisfies the KKT conditions of the
joint problem, which is convex in the precisions, so it is the optimum.

Measured sets offered: the workload's own marginals, their downward closure, and — when the union of
the workload's attributes is small — every subset of it (HDMM's OPT_M family); zero-budget marginals
are dropped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import sparse

from planner.budget import Sensitivity, continuous_laplace_variance, noise_for_group, optimal_budgets, sample_noise
from planner.privacy import Privacy
from planner.recovery import (
    Subset,
    coefficient_masses,
    downward_closure,
    helmert_basis,
    integer_counts,
    residual_of_marginal,
    residual_shape,
    subsets,
)
from planner.strategies.base import Candidate, GroupBudget, Measurement
from planner.strategies.residual import MASS_TOLERANCE, MAX_MARGINAL_CELLS, CoefficientCandidate, maximal_sets
from planner.workload import Workload, marginal_for

MAX_ITERATIONS = 3000
TOLERANCE = 1e-9  # stop alternating when the relative improvement of an iteration falls below this
PRUNE_SHARE = 1e-6  # marginals whose budget share falls below this are dropped
MAX_SUBSET_FAMILY = 256  # offer "every subset of the union" when it has at most this many subsets


def marginal_name(attributes: Subset) -> str:
    return "marginal (" + ", ".join(attributes) + ")"


class MarginalsCandidate(CoefficientCandidate):
    """Measure the marginals ``measured`` with budgets ``budgets`` (ε_B or ρ_B), recover by GLS."""

    def __init__(
        self,
        workload: Workload,
        privacy: Privacy,
        sensitivity: Sensitivity,
        measured: Sequence[Subset],
        budgets: Sequence[float],
        name: str = "marginals",
    ) -> None:
        domain = workload.domain
        super().__init__(name, workload, privacy, sensitivity, {a: helmert_basis(domain.size_of(a)) for a in domain.attributes})
        self.measured = tuple(domain.canonical(m) for m in measured)
        self.budgets = np.asarray(budgets, dtype=float)
        uncovered = [t for t in self.relevant if not any(set(t) <= set(b) for b in self.measured)]
        if uncovered:
            raise ValueError(f"measured marginals {self.measured} do not cover {uncovered}")
        self.noises = tuple(noise_for_group(privacy, b, sensitivity, 1.0, distinct_applies=True) for b in self.budgets)

    def group_budgets(self) -> tuple[GroupBudget, ...]:
        domain = self.workload.domain
        return tuple(
            GroupBudget(marginal_name(m), math.prod(domain.shape(m)), float(b), n.variance)
            for m, b, n in zip(self.measured, self.budgets, self.noises)
        )

    def required_marginals(self) -> tuple[Subset, ...]:
        return self.measured

    def _spread(self, attributes: Subset) -> int:
        return math.prod(self.workload.domain.shape(attributes))

    def coefficient_variances(self, continuous: bool = False) -> dict[Subset, np.ndarray]:
        cell_variance = [n.continuous_variance if continuous else n.variance for n in self.noises]
        result = {}
        for subset in self.needed:
            precision = sum(
                1.0 / (v * self._spread(tuple(a for a in b if a not in subset)))
                for b, v in zip(self.measured, cell_variance)
                if set(subset) <= set(b)
            )
            variance = 1.0 / precision if subset in self.relevant else 0.0  # irrelevant: estimated as 0
            result[subset] = np.full(residual_shape(subset, self.bases), variance)
        return result

    def measure(self, marginals: Mapping[Subset, np.ndarray], rng: object = None, noise: bool = True) -> Measurement:
        tables = [integer_counts(marginal_for(self.workload.domain, marginals, m), m) for m in self.measured]
        if noise:
            sizes = [t.size for t in tables]
            drawn = sample_noise(self.privacy, np.repeat([n.parameter for n in self.noises], sizes), rng)
            pieces = np.split(drawn, np.cumsum(sizes)[:-1])
            tables = [t + piece.reshape(t.shape) for t, piece in zip(tables, pieces)]
        return Measurement(
            self.name,
            {marginal_name(m): t for m, t in zip(self.measured, tables)},
            {marginal_name(m): np.full(t.shape, n.variance) for m, t, n in zip(self.measured, tables, self.noises)},
            self.privacy,
        )

    def dense_strategy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        domain = self.workload.domain
        rows = [Workload.marginals(domain, [m]).dense() for m in self.measured]
        counts = [r.shape[0] for r in rows]
        parameters = np.repeat([n.parameter for n in self.noises], counts)
        variances = np.repeat([n.variance for n in self.noises], counts)
        return np.vstack(rows), parameters, variances

    def residuals(self, measurement: Measurement) -> dict[Subset, np.ndarray]:
        variances = self.exact_coefficient_variances
        result = {}
        for subset in self.needed:
            total = np.zeros(residual_shape(subset, self.bases))
            if subset not in self.relevant:
                result[subset] = total
                continue
            for attributes, group_noise in zip(self.measured, self.noises):
                if set(subset) <= set(attributes):
                    spread = self._spread(tuple(a for a in attributes if a not in subset))
                    estimate = residual_of_marginal(measurement.values[marginal_name(attributes)], attributes, subset, self.bases)
                    total = total + estimate / (group_noise.variance * spread)
            result[subset] = total * variances[subset]
        return result


# --------------------------------------------------------------------------------------------------
# Budget optimisation: alternate closed-form budgets with GLS.
# --------------------------------------------------------------------------------------------------


def _incidence(needed: Sequence[Subset], measured: Sequence[Subset], workload: Workload) -> sparse.csr_matrix:
    """``inc[T, B] = 1 / Π_{a∈B∖T} n_a`` for ``T ⊆ B``: how much of ``B``'s precision reaches ``T``."""
    index = {t: i for i, t in enumerate(needed)}
    rows, cols, data = [], [], []
    for j, held in enumerate(measured):
        for subset in subsets(held):
            if subset in index:
                rows.append(index[subset])
                cols.append(j)
                data.append(1.0 / math.prod(workload.domain.shape(a for a in held if a not in subset)))
    return sparse.csr_matrix((data, (rows, cols)), shape=(len(needed), len(measured)))


def _precision(budgets: np.ndarray, privacy: Privacy, sensitivity: Sensitivity) -> np.ndarray:
    """Precision ``1/v_B`` per marginal for the continuous noise of its budget (0 for no budget)."""
    precision = np.zeros_like(budgets)
    used = budgets > 0
    if privacy.is_laplace:
        precision[used] = 1.0 / continuous_laplace_variance(sensitivity.rows / budgets[used])
    else:
        precision[used] = 1.0 / np.array([sensitivity.gaussian_sigma2(1.0, b, True) for b in budgets[used]])
    return precision


def optimise_budgets(
    workload: Workload, privacy: Privacy, sensitivity: Sensitivity, measured: Sequence[Subset]
) -> tuple[tuple[Subset, ...], np.ndarray]:
    """Budgets for measuring ``measured`` with GLS recovery, by alternation; drops unused marginals."""
    bases = {a: helmert_basis(workload.domain.size_of(a)) for a in workload.domain.attributes}
    needed = downward_closure(p.attributes for p in workload.products)
    masses = coefficient_masses(workload, bases)
    totals = np.array([float(np.sum(masses[t])) for t in needed])
    relevant = [t for t, m in zip(needed, totals) if m > MASS_TOLERANCE * totals.max()]
    mass = np.array([float(np.sum(masses[t])) for t in relevant])
    measured = list(measured)
    incidence = _incidence(relevant, measured, workload)
    total = privacy.epsilon if privacy.is_laplace else privacy.rho
    budgets = np.full(len(measured), total / len(measured))
    best = math.inf
    for _ in range(MAX_ITERATIONS):
        precision = _precision(budgets, privacy, sensitivity)
        covariance = 1.0 / (incidence @ precision)
        error = float(mass @ covariance)
        if error > best * (1 - TOLERANCE):
            break
        best = error
        group_mass = precision**2 * (incidence.T @ (mass * covariance**2))
        budgets = optimal_budgets(group_mass, np.ones(len(measured)), privacy)
    keep = budgets >= PRUNE_SHARE * budgets.max()
    kept = [m for m, k in zip(measured, keep) if k]
    if all(any(set(t) <= set(b) for b in kept) for t in relevant):
        budgets = budgets[keep] * (total / budgets[keep].sum())
        measured = kept
    return tuple(measured), budgets


def marginals_candidate(
    workload: Workload, privacy: Privacy, sensitivity: Sensitivity, measured: Sequence[Subset]
) -> MarginalsCandidate:
    kept, budgets = optimise_budgets(workload, privacy, sensitivity, measured)
    return MarginalsCandidate(workload, privacy, sensitivity, kept, budgets)


def measured_families(workload: Workload) -> list[tuple[Subset, ...]]:
    """Sets of marginals worth measuring for this workload (see the module docstring)."""
    own = tuple(dict.fromkeys(p.attributes for p in workload.products))
    closure = downward_closure(own)
    families = [maximal_sets(own), own, closure]
    union = workload.domain.canonical(a for p in workload.products for a in p.attributes)
    if 2 ** len(union) <= MAX_SUBSET_FAMILY:
        families.append(tuple(s for s in subsets(union) if math.prod(workload.domain.shape(s)) <= MAX_MARGINAL_CELLS))
    return list(dict.fromkeys(families))


def candidates(workload: Workload, privacy: Privacy, contributions: int, distinct_cells: bool = False) -> list[Candidate]:
    """Optimally budgeted marginal sets, one candidate per family of measured sets."""
    sensitivity = Sensitivity(contributions, distinct_cells)
    result: list[Candidate] = []
    for measured in measured_families(workload):
        if any(math.prod(workload.domain.shape(m)) > MAX_MARGINAL_CELLS for m in measured):
            continue
        result.append(marginals_candidate(workload, privacy, sensitivity, measured))
    return result
