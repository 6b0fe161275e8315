"""Composite strategies: a workload made of parts that read disjoint attribute sets apart from a small
shared set ``Z`` (a star), each part measured by its own best family under a sequential split of the
budget, the parts made consistent on the one linear function they share, the ``Z``-marginal (the grand
total when ``Z = ∅``), by exact GLS.

*Parts.* For a set ``Z`` of attributes, two products belong to one part when their attribute sets
minus ``Z`` intersect (connected components of the "shares an attribute outside ``Z``" graph);
products reading nothing outside ``Z`` (the total, a ``Z``-marginal) join the part with the most
queries. ``Workload.prefix(dom, "x") + Workload.prefix(dom, "y")`` has two parts with ``Z = ∅``;
``AllRange(age) ⊗ Identity(sex)`` beside the (sex, race) marginal is one component, but two parts with
``Z = {sex}``. The shared set is the smallest that gives two or more parts: ``∅`` first, then single
attributes, then pairs (fewest ``Z``-cells first), with at most :data:`MAX_SHARED_CELLS` cells. A part
may measure only its own attributes and ``Z``, so two parts' measured marginals ``M_i`` meet inside
``Z``. The family is offered only for two or more parts, so a part never offers it again, and only
when some part's best strategy is a range family (see :func:`candidates`).

*Budgets.* Each part is planned by every family (``planner.select.all_candidates``) at the full
budget, giving its least error ``E_i``. With ``error_i = E_i/ρ_i`` (zCDP) the split minimising
``Σ_i error_i`` subject to ``Σ ρ_i = ρ`` is ``ρ_i ∝ √E_i``; with ``E_i/ε_i²`` (ε-DP) it is
``ε_i ∝ E_i^{1/3}``. Sequential composition: the shares sum to the spec (never above it in floating
point). Each part is then planned again at its share, so every variance is exact for the discrete
noise actually drawn.

*GLS across parts (exact).* Part ``i``'s own GLS estimates the marginal on ``M_i`` by ``x̂_i`` with
covariance ``Σ_i``; the parts' noises are independent, so the ``x̂_i`` carry all the information. Let
``Z_i = Z ∩ M_i``, ``P_i`` sum ``M_i``-cells to ``Z_i``-cells and ``Q_i`` sum ``Z``-cells to
``Z_i``-cells. The hypergraph ``{Z, M_1, …, M_k}`` is acyclic (``M_i ∩ M_j ⊆ Z``), so marginals
``x_i`` come from one data vector iff ``P_i x_i = Q_i z`` for some ``z`` on ``Z``, and the joint GLS is

    min Σ_i (x_i − x̂_i)ᵀ Σ_i⁺ (x_i − x̂_i)   subject to  P_i x_i = Q_i z  for every i.

With ``z_i = P_i x̂_i``, ``K_i = P_iΣ_iP_iᵀ = Var z_i`` and ``D_i = Σ_iP_iᵀ = Cov(x̂_i, z_i)``, part
``i``'s minimiser for fixed ``z`` is ``x_i = x̂_i − D_iK_i⁻¹(z_i − Q_iz)`` at cost
``(z_i − Q_iz)ᵀK_i⁻¹(z_i − Q_iz)``, hence ``ẑ = A⁻¹ Σ_j Q_jᵀK_j⁻¹z_j`` with ``A = Σ_j Q_jᵀK_j⁻¹Q_j``.
A query ``q`` of part ``i`` (row ``w_q`` over ``M_i``) becomes ``a_q − c_qᵀK_i⁻¹(z_i − Q_iẑ)`` with
``c_q = D_iᵀw_q = Cov(z_i, a_q)``. From ``Cov(z_i, ẑ) = Q_iA⁻¹``, ``Var ẑ = A⁻¹``,
``Var(z_i − Q_iẑ) = K_i − Q_iA⁻¹Q_iᵀ`` and ``Cov(z_i − Q_iẑ, a_q) = c_q − Q_iA⁻¹Q_iᵀK_i⁻¹c_q``:

    Var(a_q') = Var(a_q) − c_qᵀK_i⁻¹c_q + (Q_iᵀK_i⁻¹c_q)ᵀ A⁻¹ (Q_iᵀK_i⁻¹c_q).

With ``Z = ∅`` (one ``Z``-cell, ``K_i = s_i``, ``A = S = Σ 1/s_j``) this is
``Var(a_q) − c_q²/s_i + c_q²/(s_i²S)``. A part's own ``Z_i``-marginal (``c_q`` = a row of ``K_i``)
becomes ``Q_iẑ`` exactly: all parts agree on ``Z`` and on the total. ``c_q`` is the part's workload
evaluated on the columns of ``D_i`` (answers are linear in the marginal). A part with ``K_i = 0`` (no
query of it has a ``Z``-component: every query sums to zero) has ``D_i = 0``, shares nothing and takes
no part in the combination. A part whose ``K_i`` is singular but not zero estimates only some
directions of its ``Z_i``-marginal; it is not used (no pseudo-inverse), and neither is a combination
whose ``A`` is singular: the composite is exact or not offered.

*``D_i`` per family.* When ``Σ_i = I_{Z_i} ⊗ Σ_rest`` (``Z_i`` among the attributes measured with
identity noise), ``D_i[m, z] = d_i[m]·[m_{Z_i} = z]`` with ``d_i = Σ_i1`` the link to the total: a
1-D range candidate has ``Σ_i = I ⊗ Σ_t`` (``Z_i`` must avoid its ordered attribute), so
``d_i = 1 ⊗ Σ_t1``: row sums of ``Σ_t`` block by block for dense covariances (eigen, HATs,
p-identity), ``Σ_ℓ c_ℓ E_ℓ 1`` for a tree; a Kronecker range candidate has ``Σ = v ⊗_a C_a ⊗ I``
(``Z_i`` must avoid the factored attributes), so ``d = v ⊗_a C_a1 ⊗ 1``. Marginal-type candidates
(identity, marginals, Fourier, residual: :class:`~planner.strategies.residual.CoefficientCandidate`)
estimate independent residual coefficients ``φ̂_T`` with ``x̂_A = Σ_{T⊆A} E_{A,T} φ̂_T``
(``planner.recovery``), so ``D_i = Σ_{T⊆Z_i} E_{M_i,T} diag(Var φ̂_T) E_{Z_i,T}ᵀ``, built column by
column with ``marginal_from_residuals`` (with ``Z = ∅``: ``d_i = (s_i/N_i)·1``). The tests check every
``D_i`` against dense GLS covariances. Any other candidate type, a ``Z_i`` its structure does not give
exactly, or a candidate measuring attributes outside its part is not used for a part.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.budget import within
from planner.domain import Domain
from planner.noise import as_source
from planner.privacy import Privacy
from planner.recovery import (
    marginal_from_residuals,
    padded_count,
    residual_of_marginal,
    residual_shape,
    subsets,
)
from planner.strategies.base import Answers, Candidate, GroupBudget, Measurement
from planner.strategies.hierarchy import TreeCovariance
from planner.strategies.ranges import DenseCovariance, OrderedCovariance, RangeCandidate, is_range_block
from planner.strategies.residual import CoefficientCandidate
from planner.workload import Workload, marginal_for

Search = Callable[[Workload, Privacy, int, bool], list[Candidate]]
"""The planner's candidate search over a sub-workload (empty when no family applies)."""

MAX_SHARED_ATTRIBUTES = 2
MAX_SHARED_CELLS = 64
SINGULAR_TOLERANCE = 1e-10  # a K_i or A whose eigenvalues spread wider than this is treated as singular


def parts_of(workload: Workload, shared: tuple[str, ...] = ()) -> list[tuple[int, ...]]:
    """Indices of the workload's products grouped into parts whose attribute sets meet only inside
    ``shared`` (in order of first product); products reading nothing outside ``shared`` join the part
    with the most queries."""
    parent: dict[str, str] = {}

    def root(attribute: str) -> str:
        while parent.setdefault(attribute, attribute) != attribute:
            attribute = parent[attribute]
        return attribute

    own = [tuple(a for a in product.attributes if a not in shared) for product in workload.products]
    for attributes in own:
        for attribute in attributes[1:]:
            parent[root(attribute)] = root(attributes[0])
    groups: dict[str, list[int]] = {}
    rest = []
    for index, attributes in enumerate(own):
        if attributes:
            groups.setdefault(root(attributes[0]), []).append(index)
        else:
            rest.append(index)
    parts = list(groups.values())
    if rest:
        if not parts:
            return [tuple(rest)]
        largest = max(parts, key=lambda part: sum(workload.products[i].rows for i in part))
        largest.extend(rest)
        largest.sort()
    return [tuple(part) for part in parts]


def shared_attributes(workload: Workload) -> tuple[str, ...] | None:
    """The smallest shared set ``Z`` (``∅``, then single attributes, then pairs, fewest cells first, at
    most :data:`MAX_SHARED_CELLS` cells) that splits the workload into two or more parts, else None."""
    domain = workload.domain
    read = domain.canonical(a for p in workload.products for a in p.attributes)
    for size in range(MAX_SHARED_ATTRIBUTES + 1):
        sets = sorted(itertools.combinations(read, size), key=lambda z: math.prod(domain.shape(z)))
        for shared in sets:
            if math.prod(domain.shape(shared)) <= MAX_SHARED_CELLS and len(parts_of(workload, shared)) >= 2:
                return shared
    return None


# --------------------------------------------------------------------------------------------------
# How a part's estimate covaries with its shared marginal.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SharedLink:
    """``D = Cov(x̂, z)`` of one part: a table over the marginal on ``attributes`` (its measured ``M``)
    per cell of the part's shared marginal ``z`` on ``shared ⊆ attributes`` (last axis, flattened)."""

    attributes: tuple[str, ...]
    shared: tuple[str, ...]
    covariance: np.ndarray

    @functools.cached_property
    def shared_variance(self) -> np.ndarray:
        """``K = Var z = P D`` (``Z``-cells × ``Z``-cells)."""
        cells = self.covariance.shape[-1]
        summed = tuple(i for i, a in enumerate(self.attributes) if a not in self.shared)
        return np.asarray(self.covariance.sum(axis=summed), dtype=float).reshape(cells, cells)

    @functools.cached_property
    def total_variance(self) -> float:
        """``s = Var T``: every entry of ``K`` summed."""
        return float(self.shared_variance.sum())

    @functools.cached_property
    def shared_precision(self) -> np.ndarray | None:
        """``K⁻¹``; None when ``K = 0`` (nothing shared) — raises ValueError when ``K`` is singular
        otherwise (the part estimates only some directions of its shared marginal)."""
        variance = self.shared_variance
        if not np.any(variance):
            return None
        return _inverse(variance, f"the part's variance of its marginal on {self.shared}")

    @property
    def combinable(self) -> bool:
        """Whether ``K`` is zero or invertible: the part can take part in an exact combination."""
        return not np.any(self.shared_variance) or _invertible(self.shared_variance)


def _invertible(matrix: np.ndarray) -> bool:
    eigenvalues = np.linalg.eigvalsh((matrix + matrix.T) / 2)
    return bool(eigenvalues[0] > SINGULAR_TOLERANCE * eigenvalues[-1])


def _inverse(matrix: np.ndarray, what: str) -> np.ndarray:
    if not _invertible(matrix):
        raise ValueError(f"{what} is singular: a composite over this shared set would not be exact")
    return np.linalg.inv((matrix + matrix.T) / 2)


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


def _split_by_shared(domain: Domain, measured: tuple[str, ...], shared: tuple[str, ...], d: np.ndarray) -> np.ndarray:
    """``D[m, z] = d[m]·[m_Z = z]``: the link when ``Σ = I_Z ⊗ Σ_rest`` and ``d = Σ1``."""
    cells = math.prod(domain.shape(shared))
    indicator = np.eye(cells).reshape(domain.shape(shared) + (cells,))
    along = tuple(slice(None) if a in shared else None for a in measured) + (slice(None),)
    return np.broadcast_to(d, domain.shape(measured))[..., None] * indicator[along]


def _coefficient_link(candidate: CoefficientCandidate, measured: tuple[str, ...], shared: tuple[str, ...]) -> np.ndarray | None:
    """``D = Σ_{T⊆Z} E_{M,T} diag(Var φ̂_T) E_{Z,T}ᵀ``, one column per ``Z``-cell; None when some
    residual of ``Z`` is not estimated."""
    bases, variances = candidate.bases, candidate.exact_coefficient_variances
    if any(t not in variances for t in subsets(shared)):
        return None
    shape = candidate.workload.domain.shape(shared)
    cells = math.prod(shape)
    columns = np.empty(candidate.workload.domain.shape(measured) + (cells,))
    for cell in range(cells):
        indicator = np.zeros(cells)
        indicator[cell] = 1.0
        indicator = indicator.reshape(shape)
        residuals = {t: np.zeros(residual_shape(t, bases)) for t in subsets(measured)}
        for t in subsets(shared):
            spread = padded_count((a for a in shared if a not in t), bases)
            variance = np.broadcast_to(variances[t], residual_shape(t, bases))
            residuals[t] = variance * residual_of_marginal(indicator, shared, t, bases) / spread
        columns[..., cell] = marginal_from_residuals(measured, residuals, bases)
    return columns


def shared_link(candidate: Candidate, shared: tuple[str, ...]) -> SharedLink | None:
    """The link of a part's candidate to its marginal on ``shared`` ∩ its measured attributes, or None
    when the candidate's type (or that shared set) is not one handled exactly."""
    from planner.strategies.kronecker import (
        KroneckerCandidate,  # it registers itself with select
    )

    domain = candidate.workload.domain
    if isinstance(candidate, CoefficientCandidate):
        if not candidate.consistent:
            return None
        measured = domain.canonical(a for p in candidate.workload.products for a in p.attributes)
        own = tuple(a for a in measured if a in shared)
        table = _coefficient_link(candidate, measured, own)
    elif isinstance(candidate, RangeCandidate):
        layout = candidate.layout
        measured = layout.measured
        own = tuple(a for a in measured if a in shared)
        sums = _row_sums(candidate.covariance)
        if sums is None or layout.attribute in own:
            return None
        along = [-1 if a == layout.attribute else 1 for a in measured]
        table = _split_by_shared(domain, measured, own, sums.reshape(along))
    elif isinstance(candidate, KroneckerCandidate):  # Σ = v ⊗_a C_a ⊗ I, so Σ1 = v ⊗_a C_a1 ⊗ 1
        measured = candidate.layout.measured
        own = tuple(a for a in measured if a in shared)
        if any(a in candidate.factors for a in own):
            return None
        sums = np.asarray(candidate.noise.variance)
        for attribute in measured:
            factor = candidate.factors.get(attribute)
            along = np.ones(domain.size_of(attribute)) if factor is None else factor.covariance.matrix().sum(axis=1)
            sums = np.multiply.outer(sums, along)
        table = _split_by_shared(domain, measured, own, sums)
    else:
        return None
    if table is None or not np.all(np.isfinite(table)):
        return None
    return SharedLink(measured, own, table)


def total_link(candidate: Candidate) -> SharedLink | None:
    """The link of a part's candidate to its total (``Z = ∅``: one column)."""
    return shared_link(candidate, ())


def answers_and_shared(candidate: Candidate, measurement: Measurement, shared: tuple[str, ...]) -> tuple[Answers, np.ndarray]:
    """The part's own GLS answers and its estimate ``z`` of its marginal on ``shared`` (flattened;
    types of :func:`shared_link`)."""
    from planner.strategies.kronecker import KroneckerCandidate

    domain = candidate.workload.domain
    if isinstance(candidate, RangeCandidate):
        layout = candidate.layout
        estimate = candidate.estimate(measurement)
        moved = [a for a in layout.measured if a != layout.attribute] + [layout.attribute]
        table = np.moveaxis(estimate.reshape(domain.shape(moved)), -1, layout.measured.index(layout.attribute))
        marginal = marginal_for(domain, {layout.measured: table}, shared)
        return layout.answers(estimate, candidate.covariance), np.ravel(marginal)
    if isinstance(candidate, CoefficientCandidate):
        marginal = marginal_from_residuals(shared, candidate.residuals(measurement), candidate.bases)
        return candidate.answer(measurement), np.ravel(marginal)
    if isinstance(candidate, KroneckerCandidate):
        marginal = marginal_for(domain, {candidate.layout.measured: candidate.estimate(measurement)}, shared)
        return candidate.answer(measurement), np.ravel(marginal)
    raise TypeError(f"a composite part cannot be a {type(candidate).__name__}")


# --------------------------------------------------------------------------------------------------
# The candidate.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Part:
    """One part: which workload products it answers, its candidate and its link to the shared marginal."""

    products: tuple[int, ...]
    candidate: Candidate
    link: SharedLink

    @functools.cached_property
    def covariances(self) -> np.ndarray:
        """``c_q = Cov(z, a_q)`` for every query of the part (workload order), one row per query."""
        columns = self.link.covariance.shape[-1]
        answered = [
            np.concatenate(self.candidate.workload.answer({self.link.attributes: self.link.covariance[..., k]}))
            for k in range(columns)
        ]
        return np.stack(answered, axis=1)

    def split(self, values: np.ndarray) -> tuple[np.ndarray, ...]:
        """One array per product of the part from values over all its queries."""
        ends = np.cumsum([p.rows for p in self.candidate.workload.products])[:-1]
        return tuple(np.split(values, ends))


class CompositeCandidate(Candidate):
    """Parts measured independently under a sequential budget split, made consistent on the marginal
    on ``shared`` (the total when ``shared`` is empty). Raises ValueError when that is not exact."""

    def __init__(self, workload: Workload, privacy: Privacy, parts: Sequence[Part], shared: tuple[str, ...] = ()) -> None:
        if len(parts) < 2:
            raise ValueError("a composite needs at least two parts")
        covered = sorted(i for part in parts for i in part.products)
        if covered != list(range(len(workload.products))):
            raise ValueError("the parts must answer every workload product exactly once")
        shared = workload.domain.canonical(shared)
        measured = [{a for m in part.candidate.required_marginals() for a in m} for part in parts]
        if any((measured[i] & measured[j]) - set(shared) for i in range(len(parts)) for j in range(i)):
            raise ValueError(f"the parts must measure attribute sets that meet only inside the shared {shared}")
        if any(part.link.shared != tuple(a for a in part.link.attributes if a in shared) for part in parts):
            raise ValueError(f"every part's link must be to its marginal on the shared {shared}")
        if any(part.candidate.privacy.family != privacy.family for part in parts):
            raise ValueError(f"every part must use the {privacy.family} noise family")
        spent = math.fsum(_amount(part.candidate.privacy) for part in parts)
        if spent > _amount(privacy):
            raise ValueError(f"the parts spend {spent:.17g}, more than the {privacy} budget")
        self._workload = workload
        self._privacy = privacy
        self.parts = tuple(parts)
        self.shared = shared
        self._precisions = tuple(part.link.shared_precision for part in self.parts)  # may raise
        self._summing = tuple(_summing(workload.domain, shared, part.link.shared) for part in self.parts)
        information = sum(
            (q.T @ k @ q for q, k in zip(self._summing, self._precisions) if k is not None),
            np.zeros((self.shared_cells, self.shared_cells)),
        )
        self._shared_covariance = _inverse(information, f"the information on the marginal on {shared}")
        on = f" on {', '.join(shared)}" if shared else ""
        self.name = "composite(" + " | ".join(
            f"{', '.join(p.link.attributes)}: {p.candidate.name}" for p in self.parts
        ) + ")" + on

    @property
    def shared_cells(self) -> int:
        return math.prod(self.workload.domain.shape(self.shared))

    @property
    def workload(self) -> Workload:
        return self._workload

    @property
    def privacy(self) -> Privacy:
        return self._privacy

    def _in_workload_order(self, per_part: Sequence[Sequence[np.ndarray]]) -> tuple[np.ndarray, ...]:
        result: list[np.ndarray | None] = [None] * len(self.workload.products)
        for part, arrays in zip(self.parts, per_part):
            for index, array in zip(part.products, arrays):
                result[index] = array
        return tuple(result)  # type: ignore[arg-type]

    @functools.cached_property
    def _query_variances(self) -> tuple[np.ndarray, ...]:
        """``Var(a_q) − c_qᵀK⁻¹c_q + (QᵀK⁻¹c_q)ᵀA⁻¹(QᵀK⁻¹c_q)`` (module docstring)."""
        per_part = []
        for part, precision, summing in zip(self.parts, self._precisions, self._summing):
            own = part.candidate.query_variances()
            if precision is not None:
                c = part.covariances
                weighted = c @ precision
                lifted = weighted @ summing
                change = np.einsum("qi,qi->q", lifted @ self._shared_covariance, lifted) - np.einsum("qi,qi->q", weighted, c)
                own = part.split(np.concatenate(own) + change)
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
        answered = [
            answers_and_shared(p.candidate, self._part_measurement(i, measurement), p.link.shared)
            for i, p in enumerate(self.parts)
        ]
        combined = sum(
            (q.T @ (k @ z) for q, k, (_, z) in zip(self._summing, self._precisions, answered) if k is not None),
            np.zeros(self.shared_cells),
        )
        estimate = self._shared_covariance @ combined  # ẑ
        per_part = []
        for part, precision, summing, (answers, z) in zip(self.parts, self._precisions, self._summing, answered):
            values = answers.values
            if precision is not None:
                shift = part.covariances @ (precision @ (z - summing @ estimate))
                values = part.split(np.concatenate(values) - shift)
            per_part.append(values)
        return Answers(self._in_workload_order(per_part), self.query_variances())


def _summing(domain: Domain, shared: tuple[str, ...], own: tuple[str, ...]) -> np.ndarray:
    """``Q``: sums the cells of the marginal on ``shared`` to those on ``own ⊆ shared``."""
    cells = math.prod(domain.shape(shared))
    identity = np.eye(cells).reshape(domain.shape(shared) + (cells,))
    summed = tuple(i for i, a in enumerate(shared) if a not in own)
    return identity.sum(axis=summed).reshape(-1, cells)


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
    allowed: set[str],
    shared: tuple[str, ...],
    privacy: Privacy,
    contributions: int,
    distinct_cells: bool,
    search: Search,
) -> Part | None:
    """The least-error candidate for the part that the composite handles exactly (its link to the
    shared marginal known and its ``K`` zero or invertible) and that measures only ``allowed`` attributes."""
    sub = Workload(workload.domain, tuple(workload.products[i] for i in products))
    usable = []
    found = search(sub, privacy, contributions, distinct_cells)
    for candidate in found:
        if not getattr(candidate, "consistent", True) or not math.isfinite(candidate.expected_error()):
            continue
        if any(set(m) - allowed for m in candidate.required_marginals()):
            continue
        link = shared_link(candidate, shared)
        if link is not None and link.combinable:
            usable.append(Part(products, candidate, link))
    return min(usable, key=lambda p: p.candidate.expected_error(), default=None)


def candidates(
    workload: Workload, privacy: Privacy, contributions: int, distinct_cells: bool, search: Search
) -> list[Candidate]:
    """The composite candidate when a small shared set splits the workload into two or more parts
    (:func:`shared_attributes`), every part can be planned by a family the composite handles exactly,
    and some part is best measured by a range family: when every part's best is marginal-type, the
    joint marginal-type families (one GLS over every part, budgets optimised jointly) already contain
    the composite's strategy, and choosing a composite there would only cost planning time and the
    connection's measurement re-use (``dpsql.reuse``). Each part is planned by ``search``, the
    planner's whole candidate search (passed in by ``planner.select``, which lists this family)."""
    domain = workload.domain
    if not any(domain.is_ordered(f.attributes[0]) and is_range_block(f.block) for p in workload.products for f in p.factors):
        return []  # no range family applies to any part
    shared = shared_attributes(workload)
    if shared is None:
        return []
    groups = parts_of(workload, shared)
    allowed = [{a for i in group for a in workload.products[i].attributes} | set(shared) for group in groups]
    arguments = (shared, privacy, contributions, distinct_cells, search)
    first = [_best_part(g, workload, a, *arguments) for g, a in zip(groups, allowed)]
    if any(p is None for p in first) or all(isinstance(p.candidate, CoefficientCandidate) for p in first):  # type: ignore[union-attr]
        return []
    errors = [p.candidate.expected_error() for p in first]  # type: ignore[union-attr]
    if not all(e > 0 for e in errors):
        return []
    shares = split_budget(privacy, errors)
    parts = [_best_part(g, workload, a, shared, s, contributions, distinct_cells, search) for g, a, s in zip(groups, allowed, shares)]
    if any(p is None for p in parts):
        return []
    try:
        return [CompositeCandidate(workload, privacy, parts, shared)]  # type: ignore[arg-type]
    except ValueError:  # the parts' information does not determine the shared marginal
        return []
