"""Composite strategies: a workload made of parts that read disjoint attribute sets, each part measured
by its own best family under a sequential split of the budget, the parts made consistent on the one
linear function they share, the grand total, by exact GLS.

*Parts.* Two products belong to one part when their attribute sets intersect (connected components
of the "shares an attribute" graph); products reading no attribute (the total) join the part with
the most queries. ``Workload.prefix(dom, "x") + Workload.prefix(dom, "y")`` has two parts; the family
is offered only for two or more, so a part (connected by construction) never offers it again, and
only when some part's best strategy is a range family (see :func:`candidates`).

*Budgets.* Each part is planned by every family (``planner.select.all_candidates``) at the full
budget, giving its least error ``E_i``. With ``error_i = E_i/ρ_i`` (zCDP) the split minimising
``Σ_i error_i`` subject to ``Σ ρ_i = ρ`` is ``ρ_i ∝ √E_i``; with ``E_i/ε_i²`` (ε-DP) it is
``ε_i ∝ E_i^{1/3}``. Sequential composition: the shares sum to the spec (never above it in floating
point). Each part is then planned again at its share, so every variance is exact for the discrete
noise actually drawn.

*GLS across parts (exact).* Part ``i``'s own GLS estimates the marginal on its measured attributes
``M_i`` by ``x̂_i`` with covariance ``Σ_i``; the parts' noises are independent, so the ``x̂_i`` carry
all the information and the joint GLS is

    min Σ_i (x_i − x̂_i)ᵀ Σ_i⁺ (x_i − x̂_i)   subject to  1ᵀx_1 = … = 1ᵀx_k = t,

because marginals on pairwise disjoint attribute sets come from one data vector iff their totals
agree. For fixed ``t`` part ``i``'s minimiser is ``x_i = x̂_i − d_i (T_i − t)/s_i`` with
``T_i = 1ᵀx̂_i``, ``s_i = Var T_i = 1ᵀΣ_i1`` and ``d_i = Σ_i1 = Cov(x̂_i, T_i)``, at cost
``(T_i − t)²/s_i``; hence ``t̂ = (Σ_i T_i/s_i)/S`` with ``S = Σ_i 1/s_i``. A query ``q`` of part ``i``
(row ``w_q`` over ``M_i``) becomes ``a_q − c_q (T_i − t̂)/s_i`` with ``c_q = w_qᵀd_i = Cov(a_q, T_i)``.
From ``Cov(a_q, T_i − t̂) = c_q (1 − 1/(s_i S))`` and ``Var(T_i − t̂) = s_i − 1/S``:

    Var(a_q') = Var(a_q) − c_q²/s_i + c_q²/(s_i² S).

A part's own total (``c = s_i``) becomes ``t̂`` exactly, with variance ``1/S``: all totals agree.
``c_q`` is the part's workload evaluated on the table ``d_i`` (answers are linear in the marginal).

*``d_i`` per family.* Marginal-type candidates (identity, marginals, Fourier, residual:
:class:`~planner.strategies.residual.CoefficientCandidate`) estimate independent residual
coefficients, and the total's coefficient is the only one whose marginal is not a contrast, so
``d_i = (s_i/N_i)·1`` over the ``N_i`` cells of the part's marginal (the tests check it against the
dense GLS covariance). A 1-D range candidate has ``Σ_i = I ⊗ Σ_t``, so ``d_i = 1 ⊗ Σ_t1``: row sums
of ``Σ_t`` block by block for dense covariances (eigen, HATs, p-identity), ``Σ_ℓ c_ℓ E_ℓ 1`` for a
tree; a Kronecker range candidate has ``Σ = v ⊗_a C_a ⊗ I``, so ``d = v ⊗_a C_a1 ⊗ 1``. Any other candidate type (or one measuring attributes outside its part) is not used for a part:
the composite is exact or not offered. A part whose total is not estimated (``s_i = 0``: every query
of it sums to zero) shares nothing with the others and takes no part in the combination.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.budget import within
from planner.noise import as_source
from planner.privacy import Privacy
from planner.recovery import marginal_from_residuals, product_variances
from planner.strategies.base import Answers, Candidate, GroupBudget, Measurement
from planner.strategies.hierarchy import TreeCovariance
from planner.strategies.ranges import DenseCovariance, OrderedCovariance, RangeCandidate
from planner.strategies.residual import CoefficientCandidate
from planner.workload import Product, Workload


def parts_of(workload: Workload) -> list[tuple[int, ...]]:
    """Indices of the workload's products grouped into parts reading disjoint attribute sets (in order
    of first product); products reading no attribute join the part with the most queries."""
    parent: dict[str, str] = {}

    def root(attribute: str) -> str:
        while parent.setdefault(attribute, attribute) != attribute:
            attribute = parent[attribute]
        return attribute

    for product in workload.products:
        for attribute in product.attributes[1:]:
            parent[root(attribute)] = root(product.attributes[0])
    groups: dict[str, list[int]] = {}
    totals = []
    for index, product in enumerate(workload.products):
        if product.attributes:
            groups.setdefault(root(product.attributes[0]), []).append(index)
        else:
            totals.append(index)
    parts = list(groups.values())
    if totals:
        if not parts:
            return [tuple(totals)]
        largest = max(parts, key=lambda part: sum(workload.products[i].rows for i in part))
        largest.extend(totals)
        largest.sort()
    return [tuple(part) for part in parts]


# --------------------------------------------------------------------------------------------------
# How a part's estimate covaries with its total.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class TotalLink:
    """``d = Cov(x̂, T)`` of one part as a table over the marginal on ``attributes`` (``s = Σ d``)."""

    attributes: tuple[str, ...]
    covariance: np.ndarray

    @functools.cached_property
    def total_variance(self) -> float:
        return float(self.covariance.sum())


def _row_sums(covariance: OrderedCovariance) -> np.ndarray | None:
    """``Σ_t 1`` for the covariances whose structure gives it exactly, else None."""
    if isinstance(covariance, DenseCovariance):
        sums = np.empty(covariance.size)
        for start, rows in covariance.row_blocks():
            sums[start : start + rows.shape[0]] = rows.sum(axis=1)
        return sums
    if isinstance(covariance, TreeCovariance):  # Σ_ℓ c_ℓ E_ℓ 1_real over the padded leaves
        tree = covariance.tree
        real = np.zeros(tree.padded)
        real[: tree.size] = 1.0
        sums = np.zeros(tree.padded)
        for level, weight in enumerate(covariance.weights):
            if weight != 0.0:
                width = tree.block_sizes[level]
                sums += weight * np.repeat(tree.level_sums(real, level) / width, width)
        return sums[: tree.size]
    return None


def total_link(candidate: Candidate) -> TotalLink | None:
    """The link of a part's candidate, or None when its type is not one handled exactly."""
    domain = candidate.workload.domain
    if isinstance(candidate, CoefficientCandidate):
        if not candidate.consistent:
            return None
        attributes = domain.canonical(a for p in candidate.workload.products for a in p.attributes)
        total = Product(domain, ())
        variance = float(product_variances(total, candidate.exact_coefficient_variances, candidate.bases)[0])
        shape = domain.shape(attributes)
        return TotalLink(attributes, np.full(shape, variance / math.prod(shape)))
    if isinstance(candidate, RangeCandidate):
        sums = _row_sums(candidate.covariance)
        if sums is None:
            return None
        layout = candidate.layout
        measured = layout.measured
        along = [-1 if a == layout.attribute else 1 for a in measured]
        return TotalLink(measured, np.broadcast_to(sums.reshape(along), domain.shape(measured)))
    from planner.strategies.kronecker import KroneckerCandidate  # it registers itself with select

    if isinstance(candidate, KroneckerCandidate):  # Σ = v ⊗_a C_a ⊗ I, so Σ1 = v ⊗_a C_a1 ⊗ 1
        measured = candidate.layout.measured
        sums = np.asarray(candidate.noise.variance)
        for attribute in measured:
            factor = candidate.factors.get(attribute)
            along = np.ones(domain.size_of(attribute)) if factor is None else factor.covariance.matrix().sum(axis=1)
            sums = np.multiply.outer(sums, along)
        return TotalLink(measured, sums)
    return None


def answers_and_total(candidate: Candidate, measurement: Measurement) -> tuple[Answers, float]:
    """The part's own GLS answers and its estimate ``T`` of the total (types of :func:`total_link`)."""
    if isinstance(candidate, RangeCandidate):
        estimate = candidate.estimate(measurement)
        return candidate.layout.answers(estimate, candidate.covariance), float(estimate.sum())
    if isinstance(candidate, CoefficientCandidate):
        total = marginal_from_residuals((), candidate.residuals(measurement), candidate.bases)
        return candidate.answer(measurement), float(np.sum(total))
    from planner.strategies.kronecker import KroneckerCandidate

    if isinstance(candidate, KroneckerCandidate):
        return candidate.answer(measurement), float(candidate.estimate(measurement).sum())
    raise TypeError(f"a composite part cannot be a {type(candidate).__name__}")


# --------------------------------------------------------------------------------------------------
# The candidate.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Part:
    """One part: which workload products it answers, its candidate and its link to the total."""

    products: tuple[int, ...]
    candidate: Candidate
    link: TotalLink

    @functools.cached_property
    def covariances(self) -> tuple[np.ndarray, ...]:
        """``c_q = Cov(a_q, T)`` for every query of the part, one array per product."""
        return tuple(self.candidate.workload.answer({self.link.attributes: self.link.covariance}))


class CompositeCandidate(Candidate):
    """Parts measured independently under a sequential budget split, made consistent on the total."""

    def __init__(self, workload: Workload, privacy: Privacy, parts: Sequence[Part]) -> None:
        if len(parts) < 2:
            raise ValueError("a composite needs at least two parts")
        covered = sorted(i for part in parts for i in part.products)
        if covered != list(range(len(workload.products))):
            raise ValueError("the parts must answer every workload product exactly once")
        measured = [{a for m in part.candidate.required_marginals() for a in m} for part in parts]
        if any(measured[i] & measured[j] for i in range(len(parts)) for j in range(i)):
            raise ValueError("the parts must measure disjoint attribute sets")
        if any(part.candidate.privacy.family != privacy.family for part in parts):
            raise ValueError(f"every part must use the {privacy.family} noise family")
        spent = math.fsum(_amount(part.candidate.privacy) for part in parts)
        if spent > _amount(privacy):
            raise ValueError(f"the parts spend {spent:.17g}, more than the {privacy} budget")
        self._workload = workload
        self._privacy = privacy
        self.parts = tuple(parts)
        self.name = "composite(" + " | ".join(
            f"{', '.join(p.link.attributes)}: {p.candidate.name}" for p in self.parts
        ) + ")"

    @property
    def workload(self) -> Workload:
        return self._workload

    @property
    def privacy(self) -> Privacy:
        return self._privacy

    @functools.cached_property
    def _total_precision(self) -> float:
        """``S = Σ 1/s_i`` over the parts whose total is estimated."""
        return sum(1.0 / p.link.total_variance for p in self.parts if p.link.total_variance > 0)

    def _in_workload_order(self, per_part: Sequence[Sequence[np.ndarray]]) -> tuple[np.ndarray, ...]:
        result: list[np.ndarray | None] = [None] * len(self.workload.products)
        for part, arrays in zip(self.parts, per_part):
            for index, array in zip(part.products, arrays):
                result[index] = array
        return tuple(result)  # type: ignore[arg-type]

    @functools.cached_property
    def _query_variances(self) -> tuple[np.ndarray, ...]:
        precision = self._total_precision
        per_part = []
        for part in self.parts:
            own = part.candidate.query_variances()
            s = part.link.total_variance
            if s > 0:
                shrink = 1.0 / s - 1.0 / (s * s * precision)
                own = tuple(v - c * c * shrink for v, c in zip(own, part.covariances))
            per_part.append(own)
        return self._in_workload_order(per_part)

    def query_variances(self) -> tuple[np.ndarray, ...]:
        return self._query_variances

    def group_budgets(self) -> tuple[GroupBudget, ...]:
        return tuple(
            GroupBudget(_prefix(i) + g.name, g.rows, g.budget, g.noise_variance)
            for i, part in enumerate(self.parts)
            for g in part.candidate.group_budgets()
        )

    def required_marginals(self) -> tuple[tuple[str, ...], ...]:
        return tuple(dict.fromkeys(m for part in self.parts for m in part.candidate.required_marginals()))

    def measure(self, marginals: Mapping[tuple[str, ...], np.ndarray], rng: object = None, noise: bool = True) -> Measurement:
        source = None if rng is None else as_source(rng)  # one stream for all parts: independent noise
        values: dict[str, np.ndarray] = {}
        variances: dict[str, np.ndarray] = {}
        metadata: dict[str, object] = {}
        for i, part in enumerate(self.parts):
            measured = part.candidate.measure(marginals, rng=source, noise=noise)
            prefix = _prefix(i)
            values.update({prefix + key: value for key, value in measured.values.items()})
            variances.update({prefix + key: value for key, value in measured.variances.items()})
            metadata[prefix + "metadata"] = dict(measured.metadata)
        return Measurement(self.name, values, variances, self.privacy, metadata)

    def _part_measurement(self, index: int, measurement: Measurement) -> Measurement:
        part = self.parts[index]
        prefix = _prefix(index)
        own = {key[len(prefix) :]: value for key, value in measurement.values.items() if key.startswith(prefix)}
        own_variances = {key[len(prefix) :]: v for key, v in measurement.variances.items() if key.startswith(prefix)}
        metadata = measurement.metadata.get(prefix + "metadata", {})
        return Measurement(part.candidate.name, own, own_variances, part.candidate.privacy, metadata)  # type: ignore[arg-type]

    def answer(self, measurement: Measurement) -> Answers:
        if measurement.strategy != self.name:
            raise ValueError(f"this measurement was made by {measurement.strategy!r}, not {self.name!r}")
        answered = [answers_and_total(p.candidate, self._part_measurement(i, measurement)) for i, p in enumerate(self.parts)]
        precision = self._total_precision
        combined = sum(total / p.link.total_variance for p, (_, total) in zip(self.parts, answered) if p.link.total_variance > 0)
        grand_total = combined / precision if precision > 0 else 0.0
        per_part = []
        for part, (answers, total) in zip(self.parts, answered):
            s = part.link.total_variance
            values = answers.values
            if s > 0:
                shift = (total - grand_total) / s
                values = tuple(v - c * shift for v, c in zip(values, part.covariances))
            per_part.append(values)
        return Answers(self._in_workload_order(per_part), self.query_variances())


def _prefix(index: int) -> str:
    """What the names of part ``index``'s groups and measured values start with."""
    return f"part {index}: "


def _amount(privacy: Privacy) -> float:
    return privacy.epsilon if privacy.is_laplace else privacy.rho  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# Planning.
# --------------------------------------------------------------------------------------------------


def split_budget(privacy: Privacy, errors: Sequence[float]) -> list[Privacy]:
    """Shares minimising ``Σ E_i/ρ_i`` (``ρ_i ∝ √E_i``) or ``Σ E_i/ε_i²`` (``ε_i ∝ E_i^{1/3}``); their
    sum never exceeds the spec in floating point."""
    power = 1 / 3 if privacy.is_laplace else 1 / 2
    weights = np.asarray(errors, dtype=float) ** power
    total = _amount(privacy)
    shares = within(total * weights / weights.sum(), total).tolist()
    return [Privacy.laplace(s) if privacy.is_laplace else Privacy.zcdp(s) for s in shares]


def _best_part(
    products: tuple[int, ...],
    workload: Workload,
    foreign: set[str],
    privacy: Privacy,
    contributions: int,
    distinct_cells: bool,
) -> Part | None:
    """The least-error candidate for the part that the composite handles exactly and that measures no
    attribute of another part."""
    from planner.select import (  # select imports this module's family
        NoCandidateError,
        all_candidates,
    )

    sub = Workload(workload.domain, tuple(workload.products[i] for i in products))
    try:
        found = all_candidates(sub, privacy, contributions, distinct_cells)
    except NoCandidateError:
        return None
    usable = []
    for candidate in found:
        if not getattr(candidate, "consistent", True) or not math.isfinite(candidate.expected_error()):
            continue
        if any(set(m) & foreign for m in candidate.required_marginals()):
            continue
        link = total_link(candidate)
        if link is not None:
            usable.append(Part(products, candidate, link))
    return min(usable, key=lambda p: p.candidate.expected_error(), default=None)


def candidates(workload: Workload, privacy: Privacy, contributions: int, distinct_cells: bool = False) -> list[Candidate]:
    """The composite candidate when the workload has two or more parts, every part can be planned by a
    family the composite handles exactly, and some part is best measured by a range family: when every
    part's best is marginal-type, the joint marginal-type families (one GLS over every part, budgets
    optimised jointly) already contain the composite's strategy, and choosing a composite there would
    only cost planning time and the connection's measurement re-use (``dpsql.reuse``)."""
    groups = parts_of(workload)
    if len(groups) < 2:
        return []
    reads = [{a for i in group for a in workload.products[i].attributes} for group in groups]
    foreign = [set().union(*(r for j, r in enumerate(reads) if j != i)) for i in range(len(groups))]
    first = [_best_part(g, workload, f, privacy, contributions, distinct_cells) for g, f in zip(groups, foreign)]
    if any(p is None for p in first) or all(isinstance(p.candidate, CoefficientCandidate) for p in first):  # type: ignore[union-attr]
        return []
    errors = [p.candidate.expected_error() for p in first]  # type: ignore[union-attr]
    if not all(e > 0 for e in errors):
        return []
    shares = split_budget(privacy, errors)
    parts = [_best_part(g, workload, f, s, contributions, distinct_cells) for g, f, s in zip(groups, foreign, shares)]
    if any(p is None for p in parts):
        return []
    return [CompositeCandidate(workload, privacy, parts)]  # type: ignore[arg-type]
