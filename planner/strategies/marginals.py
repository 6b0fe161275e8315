"""Strategies that measure a set of marginals, each with its own budget, answered by GLS.

Each measured marginal ``B`` is one group of §2 (``C = 1``): a privacy unit's rows land in at most
``k`` of its cells. With i.i.d. per-cell noise ``v_B``, the GLS estimate of every residual coefficient of
``T`` is the inverse-variance mean over measured ``B ⊇ T`` (``planner.recovery``), with variance

    V_T = 1 / Σ_{B ⊇ T} 1 / (v_B Π_{a∈B∖T} n_a).

The workload's error is ``E = Σ_T c_T V_T`` (``c_T`` = its recovery mass on ``T``), and the recovery mass
of group ``B`` under GLS is ``a_B = ∂E/∂v_B = Σ_{T⊆B} c_T V_T² / (v_B² Π_{B∖T} n_a)``. Budgets alternate
with GLS (docs/math.md §3): closed-form budgets for the current masses, then GLS masses for those budgets.
Each step minimises an upper bound of ``E`` that is tight at the current point (GLS is the best recovery
for any budgets), so the error never rises; for zCDP a fixed point satisfies the KKT conditions of the
joint problem, which is convex in the precisions, so it is the optimum.

Measured sets offered: the workload's own marginals, their downward closure, and — when the union of
the workload's attributes is small — every subset of it (HDMM's OPT_M family); zero-budget marginals
are dropped. Under Laplace noise the alternation only finds a local optimum (the problem is not convex)
and fewer, larger marginals often win, because every group shares ε: greedy *coverings* of the workload
by larger marginals, over a grid of size limits, are screened by a short alternation, and the best is
refined by a first-improvement local search (grow, shrink, drop or merge marginals). For all 2-way
marginals on 16 binary attributes this finds ten 6-attribute marginals covering every pair: 32× the SVD
bound, against 71.6× published for HDMM (the affine plane AG(2,4), twenty 4-attribute marginals
covering each pair once, gives 29.9×).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from planner.domain import Domain
from planner.budget import (
    Sensitivity,
    continuous_laplace_variance,
    noises_for_groups,
    optimal_split,
    sample_noise,
    within,
)
from planner.privacy import Privacy
from planner.recovery import (
    Subset,
    coefficient_masses,
    downward_closure,
    first_containing,
    helmert_basis,
    integer_counts,
    inverse_variance_mean,
    residual_of_marginal,
    residual_shape,
    subsets,
)
from planner.store import CoefficientEstimate
from planner.strategies.base import Candidate, GroupBudget, Measurement
from planner.strategies.residual import MASS_TOLERANCE, MAX_MARGINAL_CELLS, CoefficientCandidate, maximal_sets
from planner.workload import Workload, marginal_for

if TYPE_CHECKING:
    from scipy import sparse

MAX_ITERATIONS = 3000
TOLERANCE = 1e-9  # stop alternating when the relative improvement of an iteration falls below this
PRUNE_SHARE = 1e-6  # marginals whose budget share falls below this are dropped
MAX_SUBSET_FAMILY = 256  # offer "every subset of the union" when it has at most this many subsets
COVERING_MAX_ATTRIBUTES = 8  # coverings use marginals of at most this many attributes …
COVERING_STEPS = 8  # … and at most 4^7 times the cells of the largest workload marginal
SCREENING_ITERATIONS = 60  # coverings are compared after this many alternations, the best refined
SCREENING_TOLERANCE = 1e-4
REFINE_WORK = 15_000  # local-search budget: short alternations × residual subsets they involve
COVERING_MAX_UNION = 62  # coverings are searched over at most this many attributes (one int64 bit each)


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
        sources = np.diff(self._incidence.indptr)  # measured marginals containing each needed subset
        uncovered = [t for t, count in zip(self.needed, sources) if count == 0 and t in self.relevant]
        if uncovered:
            raise ValueError(f"measured marginals {self.measured} do not cover {uncovered}")
        self.noises = noises_for_groups(privacy, self.budgets, sensitivity, 1.0, distinct_applies=True)

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

    @functools.cached_property
    def _incidence(self) -> sparse.csr_matrix:
        return incidence(self.needed, self.measured, self.workload)

    def coefficient_variances(self, continuous: bool = False) -> dict[Subset, np.ndarray]:
        cell_variance = np.array([n.continuous_variance if continuous else n.variance for n in self.noises])
        precision = self._incidence @ (1.0 / cell_variance)
        result = {}
        for subset, total in zip(self.needed, precision):
            variance = 1.0 / total if subset in self.relevant else 0.0  # irrelevant: estimated as 0
            result[subset] = np.broadcast_to(np.float64(variance), residual_shape(subset, self.bases))  # one value, no array of it
        return result

    def measure(self, marginals: Mapping[Subset, np.ndarray], rng: object = None, noise: bool = True) -> Measurement:
        tables = [integer_counts(marginal_for(self.workload.domain, marginals, m), m) for m in self.measured]
        if noise:
            sizes = [t.size for t in tables]
            drawn = sample_noise(self.privacy, np.repeat([n.parameter for n in self.noises], sizes), rng)
            for table, piece in zip(tables, np.split(drawn, np.cumsum(sizes)[:-1])):
                table += piece.reshape(table.shape)  # each table is a fresh int64 copy (integer_counts)
            del drawn
        return Measurement(
            self.name,
            {marginal_name(m): t for m, t in zip(self.measured, tables)},
            {marginal_name(m): np.broadcast_to(np.float64(n.variance), t.shape) for m, t, n in zip(self.measured, tables, self.noises)},
            self.privacy,
        )

    def dense_strategy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        domain = self.workload.domain
        rows = [Workload.marginals(domain, [m]).dense() for m in self.measured]
        counts = [r.shape[0] for r in rows]
        parameters = np.repeat([n.parameter for n in self.noises], counts)
        variances = np.repeat([n.variance for n in self.noises], counts)
        return np.vstack(rows), parameters, variances

    def kept_estimates(self, measurement: Measurement) -> tuple[CoefficientEstimate, ...] | None:
        """Every subset of every measured marginal, one uncorrelated estimate per marginal: a noisy
        marginal on ``B`` with cell variance ``v_B`` estimates ``φ_T`` (``T ⊆ B``) with variance
        ``v_B Π_{a∈B∖T} n_a``, whether or not this workload needed ``T``."""
        if not self.in_helmert_basis():
            return None
        domain = self.workload.domain
        kept = []
        for held, noise in zip(self.measured, self.noises):
            table = np.asarray(measurement.values[marginal_name(held)], dtype=float)
            for subset in subsets(held):
                spread = float(np.prod(domain.shape(a for a in held if a not in subset)))
                estimate = residual_of_marginal(table, held, subset, self.bases)
                kept.append(CoefficientEstimate(subset, domain.shape(subset), estimate, np.broadcast_to(np.float64(noise.variance * spread), estimate.shape)))
        return tuple(kept)

    def residuals(self, measurement: Measurement) -> dict[Subset, np.ndarray]:
        """GLS: per residual subset, the inverse-variance mean of its estimates from every measured
        marginal containing it (``planner.recovery``)."""
        sources = self._incidence.tocsr()
        result = {}
        for row, subset in enumerate(self.needed):
            if subset not in self.relevant:
                result[subset] = np.zeros(residual_shape(subset, self.bases))
                continue
            span = slice(sources.indptr[row], sources.indptr[row + 1])
            estimates = (
                (
                    residual_of_marginal(measurement.values[marginal_name(self.measured[j])], self.measured[j], subset, self.bases),
                    self.noises[j].variance / share,  # share = 1 / Π_{a∈B∖T} n_a
                )
                for j, share in zip(sources.indices[span], sources.data[span])
            )
            result[subset], _ = inverse_variance_mean(estimates)
        return result


# --------------------------------------------------------------------------------------------------
# Budget optimisation: alternate closed-form budgets with GLS.
# --------------------------------------------------------------------------------------------------


def incidence(needed: Sequence[Subset], measured: Sequence[Subset], workload: Workload) -> sparse.csr_matrix:
    """``inc[T, B] = 1 / Π_{a∈B∖T} n_a`` for ``T ⊆ B``: how much of ``B``'s precision reaches ``T``.
    Only subsets of ``B`` as large as the largest needed ``T`` are visited."""
    from scipy import sparse  # imported on first use, not with the planner

    index = {t: i for i, t in enumerate(needed)}
    widest = max((len(t) for t in needed), default=0)
    domain = workload.domain
    rows, cols, data = [], [], []
    for j, held in enumerate(measured):
        sizes = [domain.size_of(a) for a in held]
        cells = math.prod(sizes)
        for width in range(min(widest, len(held)) + 1):
            for chosen in itertools.combinations(range(len(held)), width):
                row = index.get(tuple(held[i] for i in chosen))
                if row is not None:
                    rows.append(row)
                    cols.append(j)
                    data.append(1.0 / (cells // math.prod(sizes[i] for i in chosen)))
    return sparse.csr_matrix((data, (rows, cols)), shape=(len(needed), len(measured)))


def _precision(budgets: np.ndarray, privacy: Privacy, sensitivity: Sensitivity) -> np.ndarray:
    """Precision ``1/v_B`` per marginal for the continuous noise of its budget (0 for no budget)."""
    precision = np.zeros_like(budgets)
    used = budgets > 0
    if privacy.is_laplace:
        precision[used] = 1.0 / continuous_laplace_variance(sensitivity.rows / budgets[used])
    else:
        precision[used] = 1.0 / sensitivity.gaussian_sigma2(1.0, budgets[used], True)  # elementwise
    return precision


class BudgetProblem:
    """The workload's recovery masses per residual subset, ready to budget any set of marginals."""

    def __init__(self, workload: Workload, privacy: Privacy, sensitivity: Sensitivity) -> None:
        self.workload, self.privacy, self.sensitivity = workload, privacy, sensitivity
        bases = {a: helmert_basis(workload.domain.size_of(a)) for a in workload.domain.attributes}
        needed = downward_closure(p.attributes for p in workload.products)
        masses = coefficient_masses(workload, bases)
        totals = np.array([float(np.sum(masses[t])) for t in needed])
        keep = totals > MASS_TOLERANCE * totals.max()
        self.relevant = tuple(t for t, k in zip(needed, keep) if k)
        self.mass = totals[keep]
        self.total = privacy.epsilon if privacy.is_laplace else privacy.rho

    def covers(self, measured: Sequence[Subset]) -> bool:
        return len(first_containing(self.relevant, measured)) == len(self.relevant)

    def solve(
        self, measured: Sequence[Subset], iterations: int = MAX_ITERATIONS, tolerance: float = TOLERANCE
    ) -> tuple[tuple[Subset, ...], np.ndarray, float]:
        """Alternate closed-form budgets with GLS from uniform budgets; drop unused marginals.
        Returns the kept marginals, their budgets and the (continuous-noise) expected error."""
        measured = list(measured)
        coverage = incidence(self.relevant, measured, self.workload)
        coverage_transposed = coverage.T.tocsr()
        budgets = np.full(len(measured), self.total / len(measured))
        best, best_budgets = math.inf, budgets
        for _ in range(iterations):
            precision = _precision(budgets, self.privacy, self.sensitivity)
            covariance = 1.0 / (coverage @ precision)
            error = float(self.mass @ covariance)
            if error >= best:
                break
            improved = error < best * (1 - tolerance)
            best, best_budgets = error, budgets
            if not improved:
                break
            group_mass = precision**2 * (coverage_transposed @ (self.mass * covariance**2))
            budgets = optimal_split(group_mass, np.ones(len(measured)), self.privacy)  # checked once, below
        keep = best_budgets >= PRUNE_SHARE * best_budgets.max()
        if not self.covers([m for m, k in zip(measured, keep) if k]):
            keep = best_budgets > 0  # a marginal that alone covers a subset never loses all its budget
        kept = [m for m, k in zip(measured, keep) if k]
        return tuple(kept), within(best_budgets[keep] * (self.total / best_budgets[keep].sum()), self.total), best


def _greedy_cover(
    masks: np.ndarray, start_order: np.ndarray, log_cells: np.ndarray, max_attributes: int, log_limit: float
) -> list[int]:
    """Cover every set (bit mask) by blocks of at most ``max_attributes`` bits and ``2^log_limit`` cells:
    start from the first uncovered set in ``start_order``, add the attribute that covers the most
    uncovered sets (ties: the earlier attribute, i.e. the smaller one) until nothing more fits."""
    uncovered = np.ones(masks.size, dtype=bool)
    single = np.left_shift(1, np.arange(log_cells.size, dtype=np.int64))
    blocks = []
    for start in start_order:
        if not uncovered[start]:
            continue
        block = int(masks[start])
        block_cells = float(log_cells[(block & single) != 0].sum())
        open_masks = masks[uncovered]
        covered = int(np.count_nonzero((open_masks & ~block) == 0))
        while bin(block).count("1") < max_attributes:
            allowed = ((block & single) == 0) & (block_cells + log_cells <= log_limit)
            if not allowed.any():
                break
            grown = block | single[allowed]  # every allowed one-attribute extension at once
            gains = np.count_nonzero((open_masks[None, :] & ~grown[:, None]) == 0, axis=1)
            pick = int(np.argmax(gains))  # ties: the earlier attribute
            if gains[pick] <= covered:
                break
            best = int(np.flatnonzero(allowed)[pick])
            block, block_cells, covered = block | 1 << best, block_cells + log_cells[best], int(gains[pick])
        blocks.append(block)
        uncovered &= (masks & ~block) != 0
    return blocks


def coverings(workload: Workload) -> list[tuple[Subset, ...]]:
    """Greedy coverings of the workload's marginals by larger marginals, over a grid of block limits
    (attributes × cells), deduplicated. Fewer, larger marginals mean fewer groups sharing ε, which is
    what Laplace noise favours; the budget alternation then judges each covering exactly. None when the
    workload reads more than ``COVERING_MAX_UNION`` attributes."""
    domain = workload.domain
    own = list(dict.fromkeys(p.attributes for p in workload.products))
    union = sorted(domain.canonical(a for s in own for a in s), key=domain.size_of)  # small attributes first
    if len(union) > COVERING_MAX_UNION:
        return []
    bit = {a: 1 << i for i, a in enumerate(union)}
    masks = np.array([sum(bit[a] for a in s) for s in own], dtype=np.int64)
    log_cells = np.log2([float(domain.size_of(a)) for a in union])
    own_log_cells = np.array([sum(log_cells[union.index(a)] for a in s) for s in own])
    start_order = np.lexsort((-own_log_cells, -np.array([len(s) for s in own])))  # largest first
    widest = max(len(s) for s in own)
    found: dict[tuple[Subset, ...], None] = {}
    for max_attributes in range(widest, min(len(union), COVERING_MAX_ATTRIBUTES) + 1):
        for step in range(COVERING_STEPS):
            log_limit = float(own_log_cells.max()) + 2 * step + 1e-9
            if log_limit > math.log2(MAX_MARGINAL_CELLS):
                break
            blocks = _greedy_cover(masks, start_order, log_cells, max_attributes, log_limit)
            found.setdefault(tuple(domain.canonical(a for a in union if b & bit[a]) for b in blocks), None)
    return list(found)


def _neighbours(domain: Domain, measured: list[Subset]) -> Iterator[list[Subset]]:
    """Sets of marginals one move away: add or drop an attribute of a marginal, drop a marginal, or
    merge two marginals."""
    for i, held in enumerate(measured):
        rest = measured[:i] + measured[i + 1 :]
        for attribute in domain.attributes:
            if attribute not in held:
                yield rest[:i] + [domain.canonical(held + (attribute,))] + rest[i:]
            elif len(held) > 1:
                yield rest[:i] + [tuple(a for a in held if a != attribute)] + rest[i:]
        yield rest
    for i, j in itertools.combinations(range(len(measured)), 2):
        merged = domain.canonical(measured[i] + measured[j])
        yield [m for k, m in enumerate(measured) if k not in (i, j)] + [merged]


def refine(problem: BudgetProblem, measured: Sequence[Subset]) -> tuple[Subset, ...]:
    """First-improvement local search over :func:`_neighbours`, each judged after a short alternation
    and confirmed by a full one; stops at a local optimum or when the work budget is spent."""
    domain = problem.workload.domain
    allowed = max(1, REFINE_WORK // len(problem.relevant))
    current, budgets, error = problem.solve(measured)
    current = list(current)
    evaluations = 0
    improved = True
    while improved and evaluations < allowed:
        improved = False
        for neighbour in _neighbours(domain, current):
            if evaluations >= allowed:
                break
            if not problem.covers(neighbour) or any(math.prod(domain.shape(m)) > MAX_MARGINAL_CELLS for m in neighbour):
                continue
            evaluations += 1
            if problem.solve(neighbour, SCREENING_ITERATIONS, SCREENING_TOLERANCE)[2] >= error * (1 - SCREENING_TOLERANCE):
                continue
            kept, _, candidate_error = problem.solve(neighbour)
            if candidate_error < error:
                current, error, improved = list(kept), candidate_error, True
                break
    return tuple(current)


def marginals_candidate(
    workload: Workload, privacy: Privacy, sensitivity: Sensitivity, measured: Sequence[Subset]
) -> MarginalsCandidate:
    kept, budgets, _ = BudgetProblem(workload, privacy, sensitivity).solve(measured)
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
    problem = BudgetProblem(workload, privacy, sensitivity)
    solved = []
    for measured in measured_families(workload):
        if all(math.prod(workload.domain.shape(m)) <= MAX_MARGINAL_CELLS for m in measured):
            solved.append(problem.solve(measured))
    if privacy.is_laplace:  # zCDP needs no coverings: the residual strategy is optimal there
        screened = [problem.solve(c, SCREENING_ITERATIONS, SCREENING_TOLERANCE) for c in coverings(workload)]
        if screened:
            best = min(screened, key=lambda s: s[2])
            solved.append(problem.solve(refine(problem, best[0])))
    unique: dict[tuple[Subset, ...], tuple[np.ndarray, float]] = {}  # families often prune to the same marginals
    for kept, budgets, error in solved:
        if kept not in unique or error < unique[kept][1]:
            unique[kept] = (budgets, error)
    return [MarginalsCandidate(workload, privacy, sensitivity, kept, budgets) for kept, (budgets, _) in unique.items()]
