"""Kronecker products of 1-D range strategies over several ordered attributes (docs/math.md §3, §5).

A workload whose products put range blocks (``Prefix``, ``AllRange``, interval ``Predicate``) on two or
more ordered attributes ``T`` — all 2-D ranges, prefix × prefix, ``AllRange(x) ⊗ Identity(s) ⊗ AllRange(y)``
— is measured on the marginal ``M = T ∪ (every attribute the workload reads)`` with the strategy

    S = ⊗_{a∈T} S_a ⊗ I_O        (O = M ∖ T: identity on the other attributes),

one integer 1-D strategy ``S_a`` per ordered attribute, every row with the same discrete noise of variance
``v``. Column norms of a Kronecker product are the products of the factors' column norms, so the exact
sensitivity is ``Π_a max_j ‖S_a[:, j]‖₁`` (ε-DP) or ``Π_a max_j ‖S_a[:, j]‖₂`` (zCDP). GLS factorises:
``C = (SᵀS)⁻¹ = ⊗_a C_a ⊗ I`` with ``C_a = (S_aᵀS_a)⁻¹``, the estimate applies ``C_a S_aᵀ`` along each
axis of ``T`` (the full Kronecker matrix is never formed), and every answer comes from that one estimate
of the measured marginal (consistent). A product row ``⊗_a r_a ⊗ r_o`` has variance
``v Π_a r_aᵀC_a r_a · ‖r_o‖²`` (``1ᵀC_a1`` where the product sums ``a`` out, the attribute's size where
it sums out an attribute of ``O``), so the exact expected error is
``v Σ_p w_p² ‖W_{p,O}‖²_F Π_a tr(B_{p,a} C_a B_{p,a}ᵀ)``.

Which 1-D strategies. With the other factors fixed, the error is ``Δ_a² tr(G̃_a C_a)`` times a constant,
where ``G̃_a = Σ_p w_p² ‖W_{p,O}‖²_F Π_{b≠a} tr(B_{p,b} C_b B_{p,b}ᵀ) · B_{p,a}ᵀB_{p,a}``: exactly the
error of a 1-D strategy on the one-attribute workload with those weights. So each factor is the best 1-D
candidate of the existing families on that sub-workload (eigen-design, or a hierarchy, under zCDP;
hats, p-identity or a hierarchy under ε-DP), starting from ``C_b = I`` and alternating a few rounds (for
one product ``W_x ⊗ W_y`` the weights do not matter and the first round is already optimal). Identical
sub-workloads (same size, blocks and normalised weights) are built once.

Integer rows. A 1-D candidate is turned into one real matrix with uniform noise (a level measured with
budget ``ε_ℓ`` and column magnitude ``C_ℓ`` becomes its rows times ``ε_ℓ/C_ℓ``, or ``√ρ_ℓ/C_ℓ``), scaled so
that its largest column norm is ``2^bits`` and rounded; noise, sensitivity, GLS and every stated
variance are those of the rounded matrices, so the stated error is exact for what is released. ``bits``
is ``TOTAL_SCALE_BITS/|T|`` (12 for two attributes: rounding then costs about 0.05% of error per factor),
fewer when a tiny ε or ρ would otherwise push the noise parameter past ``planner.noise``'s limits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner.budget import GroupNoise, Sensitivity, noise_for_group, sample_noise
from planner.domain import Domain
from planner.noise import MAX_GAUSSIAN_SIGMA2, MAX_LAPLACE_SCALE, NoiseParameterError
from planner.privacy import Privacy
from planner.recovery import integer_counts
from planner.strategies import eigen, hats, hierarchy, pidentity
from planner.strategies.base import Answers, Candidate, GroupBudget, Measurement
from planner.strategies.ranges import (
    MAX_MEASURED_CELLS,
    _cheap,
    block_variances,
    is_range_block,
    row_norms2,
)
from planner.workload import Block, Factor, Product, Total, Workload, marginal_for

MAX_FACTOR_SIZE = hats.MAX_SIZE  # per-attribute dense GLS
PIDENTITY_MAX_SIZE = 256  # the p-identity optimisation costs seconds beyond this
TOTAL_SCALE_BITS = 24  # Π_a (largest column norm of S_a) ≤ about 2^24 (see measure())
MIN_FACTOR_BITS = 6  # coarser factors lose too much to rounding: no candidate then
ROUNDING_SLACK_BITS = 2  # rounded column norms may exceed 2^bits a little
ALTERNATION_ROUNDS = 3
MAX_VALUE = 2**62  # measured integers stay below this (int64)
GROUP = "kronecker rows"


# --------------------------------------------------------------------------------------------------
# The measured marginal and how products split over it.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KroneckerLayout:
    """The ordered attributes ``T`` carrying ranges, and the measured marginal ``T ∪`` read attributes."""

    workload: Workload
    ordered: tuple[str, ...]  # domain order

    @property
    def domain(self) -> Domain:
        return self.workload.domain

    @property
    def measured(self) -> tuple[str, ...]:
        return self.domain.canonical([*self.ordered, *(a for p in self.workload.products for a in p.attributes)])

    def block(self, product: Product, attribute: str) -> Block:
        """The product's block on an ordered attribute of ``T`` (``Total`` when summed out)."""
        for factor in product.factors:
            if attribute in factor.attributes:
                return factor.block
        return Total(self.domain.size_of(attribute))

    def other_scale(self, product: Product) -> float:
        """The variance factor of the attributes of ``O`` the product sums out (their sizes)."""
        read = set(product.attributes) | set(self.ordered)
        return float(math.prod(self.domain.size_of(a) for a in self.measured if a not in read))

    def other_mass(self, product: Product) -> float:
        """``‖W_{p,O}‖²_F``: :meth:`other_scale` times the squared norms of the product's factors off ``T``."""
        mass = self.other_scale(product)
        for factor in product.factors:
            if not set(factor.attributes) & set(self.ordered):
                mass *= float(row_norms2(factor.block).sum())
        return mass

    def sub_workload(self, attribute: str, weights2: list[float]) -> Workload | None:
        """The one-attribute workload whose 1-D error is the Kronecker error as a function of ``S_a``:
        the products' blocks on ``attribute`` with squared weights ``weights2`` (normalised, equal blocks
        merged); None when no product carries weight."""
        merged: dict[Block, float] = {}
        for product, weight2 in zip(self.workload.products, weights2):
            block = self.block(product, attribute)
            merged[block] = merged.get(block, 0.0) + weight2
        largest = max(merged.values())
        if not largest > 0:
            return None
        size = self.domain.size_of(attribute)
        domain = Domain({attribute: size}, ordered={attribute})
        products = tuple(
            Product(domain, (Factor((attribute,), block),), math.sqrt(weight2 / largest))
            for block, weight2 in merged.items()
            if weight2 > 0
        )
        return Workload(domain, products)


def kronecker_layout(workload: Workload) -> KroneckerLayout | None:
    """The layout when some product has ranges on at least two ordered attributes, every factor touching
    them is one-attribute, the blocks are cheap and the measured marginal small; None otherwise."""
    domain = workload.domain
    ordered = []
    for attribute in domain.attributes:
        if not domain.is_ordered(attribute) or domain.size_of(attribute) > MAX_FACTOR_SIZE:
            continue
        factors = [f for p in workload.products for f in p.factors if attribute in f.attributes]
        if any(is_range_block(f.block) for f in factors) and all(len(f.attributes) == 1 for f in factors):
            ordered.append(attribute)
    together = any(sum(is_range_block(f.block) and f.attributes[0] in ordered for f in p.factors) >= 2 for p in workload.products)
    if not together or not all(_cheap(f.block) for p in workload.products for f in p.factors):
        return None  # ranges on different attributes in separate products: each its own strategy (composite)
    layout = KroneckerLayout(workload, tuple(ordered))
    if math.prod(domain.shape(layout.measured)) > MAX_MEASURED_CELLS:
        return None
    return layout


# --------------------------------------------------------------------------------------------------
# One integer factor per ordered attribute.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class IntegerFactor:
    """An integer 1-D strategy ``S_a`` (rows × cells) and ``C_a = (S_aᵀS_a)⁻¹``."""

    name: str
    rows: np.ndarray  # int64

    @cached_property
    def covariance(self) -> pidentity.StrategyCovariance:
        """``C_a`` (unit noise), with range variances and traces from ``planner.strategies.ranges``."""
        return pidentity.StrategyCovariance(self.rows, 1.0)

    @cached_property
    def recovery(self) -> np.ndarray:
        """``C_a S_aᵀ``: the GLS map from this factor's measurements to cells."""
        return self.covariance.matrix() @ self.rows.T.astype(float)

    @property
    def largest_entry(self) -> int:
        return int(np.abs(self.rows).max())

    @property
    def max_column_l1(self) -> int:
        return int(np.abs(self.rows).sum(axis=0).max())

    @property
    def max_column_norm2(self) -> int:
        """Exact: entries ≤ about 2^TOTAL_SCALE_BITS and a few thousand rows keep the sums in int64."""
        return int(np.einsum("ij,ij->j", self.rows, self.rows).max())


def real_rows(candidate: Candidate) -> np.ndarray:
    """A 1-D candidate as one real matrix whose rows all receive the same noise (see the module doc)."""
    if isinstance(candidate, eigen.EigenCandidate):
        return candidate.design.real_rows(0, candidate.layout.size)
    if isinstance(candidate, pidentity.PIdentityCandidate):
        return candidate.rows.astype(float)
    if isinstance(candidate, hats.HatCandidate):
        n = candidate.layout.size
        return np.vstack([
            rows * (float(budget) / hats.magnitude(n, spacing))
            for spacing, rows, budget in zip(candidate.spacings, candidate.rows, candidate.budgets)
        ])
    if isinstance(candidate, hierarchy.HierarchyCandidate):
        tree, laplace = candidate.tree, candidate.privacy.is_laplace
        cells = np.arange(tree.size)
        levels = []
        for level in candidate.noises:
            width = tree.block_sizes[level]
            boxes = (cells[None, :] // width == np.arange(math.ceil(tree.size / width))[:, None]).astype(float)
            budget = float(candidate.budgets[level])
            levels.append(boxes * (budget if laplace else math.sqrt(budget)))
        return np.vstack(levels)
    raise TypeError(f"no Kronecker factor for a {type(candidate).__name__}")


def integer_rows(real: np.ndarray, bits: int, laplace: bool) -> np.ndarray:
    """``rint(c · real)`` with ``c`` making the largest column norm (L1 for ε-DP, L2 for zCDP) ``2^bits``;
    rows that round to zero are dropped."""
    norms = np.abs(real).sum(axis=0) if laplace else np.sqrt((real**2).sum(axis=0))
    rows = np.rint(real * (2.0**bits / norms.max())).astype(np.int64)
    return rows[rows.any(axis=1)]


def one_dimensional_candidates(sub: Workload, privacy: Privacy) -> list[Candidate]:
    """The existing 1-D families' candidates on a one-attribute workload."""
    size = sub.domain.size
    if not privacy.is_laplace:
        found: list[Candidate] = eigen.candidates(sub, privacy)
        return found or hierarchy.candidates(sub, privacy)
    found = list(hats.candidates(sub, privacy))
    for hat in list(found):
        start = pidentity.hat_start(hat) if isinstance(hat, hats.HatCandidate) else None
        if start is not None and pidentity.MIN_SIZE <= size <= PIDENTITY_MAX_SIZE:
            theta = pidentity.optimised_theta(hat.layout, start)
            found.append(pidentity.PIdentityCandidate(hat.layout, privacy, Sensitivity(), pidentity.integer_strategy(theta)))
    return found or hierarchy.candidates(sub, privacy)


FactorBuilder = Callable[[Workload], IntegerFactor]


def factor_builder(privacy: Privacy, bits: int) -> FactorBuilder:
    """Builds the integer factor of the best 1-D candidate, once per distinct sub-workload. The 1-D
    candidates are planned for a unit budget (their shapes and ranking do not depend on it, and a tiny
    ε or ρ would push their own 2^16–2^24-scaled noise past the sampler's limits)."""
    built: dict[tuple[object, ...], IntegerFactor] = {}
    unit = Privacy.laplace(1.0) if privacy.is_laplace else Privacy.zcdp(1.0)

    def build(sub: Workload) -> IntegerFactor:
        key = (sub.domain.size, tuple((p.factors[0].block if p.factors else None, round(p.weight, 12)) for p in sub.products))
        if key not in built:
            best = min(one_dimensional_candidates(sub, unit), key=lambda c: c.expected_error())
            built[key] = IntegerFactor(best.name, integer_rows(real_rows(best), bits, privacy.is_laplace))
        return built[key]

    return build


# --------------------------------------------------------------------------------------------------
# The candidate.
# --------------------------------------------------------------------------------------------------


def _along(tensor: np.ndarray, matrix: np.ndarray, axis: int) -> np.ndarray:
    """``matrix`` applied to ``tensor`` along ``axis``."""
    return np.moveaxis(np.tensordot(matrix, tensor, axes=([1], [axis])), 0, axis)


class KroneckerCandidate(Candidate):
    """``⊗_a S_a ⊗ I`` on the measured marginal, one noise scale, GLS factor by factor."""

    def __init__(
        self, layout: KroneckerLayout, privacy: Privacy, sensitivity: Sensitivity, factors: Mapping[str, IntegerFactor]
    ) -> None:
        self.layout = layout
        self._privacy = privacy
        self.factors = dict(factors)
        self.name = "kronecker(" + ", ".join(f"{a}: {self.factors[a].name}" for a in layout.ordered) + ")"
        if privacy.is_laplace:
            magnitude = float(math.prod(f.max_column_l1 for f in self.factors.values()))
            self.noise: GroupNoise = noise_for_group(privacy, privacy.epsilon, sensitivity, magnitude)
        else:
            self.noise = noise_for_group(privacy, privacy.rho, sensitivity, _root_at_least(
                math.prod(f.max_column_norm2 for f in self.factors.values())))

    @property
    def workload(self) -> Workload:
        return self.layout.workload

    @property
    def privacy(self) -> Privacy:
        return self._privacy

    def product_trace(self, product: Product, attribute: str) -> float:
        """``tr(B_{p,a} C_a B_{p,a}ᵀ)`` (unit noise)."""
        return self.factors[attribute].covariance.trace(self.layout.block(product, attribute))

    def expected_error(self) -> float:
        layout = self.layout
        return self.noise.variance * float(sum(
            p.weight**2 * layout.other_mass(p) * math.prod(self.product_trace(p, a) for a in layout.ordered)
            for p in self.workload.products
        ))

    def query_variances(self) -> tuple[np.ndarray, ...]:
        return tuple(self._product_variances(p) for p in self.workload.products)

    def _product_variances(self, product: Product) -> np.ndarray:
        layout = self.layout
        scale = self.noise.variance * layout.other_scale(product)
        for attribute in layout.ordered:
            if attribute not in product.attributes:
                scale *= float(self.factors[attribute].covariance.variances(Total(layout.domain.size_of(attribute)))[0])
        result = np.asarray(scale)
        for factor in product.factors:  # a factor touching T has that one attribute only
            ordered = self.factors.get(factor.attributes[0])
            rows = row_norms2(factor.block) if ordered is None else block_variances(ordered.covariance, factor.block)
            result = np.multiply.outer(result, rows)
        return np.asarray(result, dtype=float).reshape(-1)

    def group_budgets(self) -> tuple[GroupBudget, ...]:
        measured = self.layout.measured
        rows = math.prod(
            self.factors[a].rows.shape[0] if a in self.factors else self.layout.domain.size_of(a) for a in measured
        )
        budget = self.privacy.epsilon if self.privacy.is_laplace else self.privacy.rho
        return (GroupBudget(GROUP, rows, budget, self.noise.variance),)

    def required_marginals(self) -> tuple[tuple[str, ...], ...]:
        return (self.layout.measured,)

    def measure(self, marginals: Mapping[tuple[str, ...], np.ndarray], rng: object = None, noise: bool = True) -> Measurement:
        """Exact integer strategy answers plus discrete noise.

        No int64 overflow: after applying the factors of any subset ``A ⊆ T``, an entry is
        ``Σ_j (Π_{a∈A} S_a[i_a, j_a]) x_j``, and every partial sum of it is at most
        ``Π_{a∈A} max|S_a| · Σ_j x_j ≤ Π_{a∈T} max|S_a| · N`` in absolute value (``N`` = the number of rows,
        counts are ≥ 0). This is checked below to be < 2^62 (with ``Π max|S_a| ≤ Π max column norm ≈
        2^TOTAL_SCALE_BITS``, any ``N`` below about 2^37 passes); the noise added after it is far below 2^62
        (its scale is at most ``planner.noise.MAX_LAPLACE_SCALE = 2^40`` or ``σ² ≤ 2^60``)."""
        measured = self.layout.measured
        table = integer_counts(marginal_for(self.layout.domain, marginals, measured), measured)
        if (table < 0).any():
            raise ValueError("count marginals cannot be negative")
        largest = math.prod(f.largest_entry for f in self.factors.values())
        if int(table.sum()) * largest >= MAX_VALUE:
            raise ValueError("too many rows for the Kronecker strategy's exact integer arithmetic; use fewer rows")
        for attribute, factor in self.factors.items():
            table = _along(table, factor.rows, measured.index(attribute))
        if noise:
            table = table + sample_noise(self.privacy, np.full(table.shape, self.noise.parameter), rng)
        return Measurement(self.name, {GROUP: table}, {GROUP: np.full(table.shape, self.noise.variance)}, self.privacy)

    def estimate(self, measurement: Measurement) -> np.ndarray:
        """GLS estimate of the measured marginal: ``C_a S_aᵀ`` along every axis of ``T``."""
        if measurement.strategy != self.name:
            raise ValueError(f"this measurement was made by {measurement.strategy!r}, not {self.name!r}")
        estimate = np.asarray(measurement.values[GROUP], dtype=float)
        measured = self.layout.measured
        for attribute, factor in self.factors.items():
            estimate = _along(estimate, factor.recovery, measured.index(attribute))
        return estimate

    def answer(self, measurement: Measurement) -> Answers:
        table = {self.layout.measured: self.estimate(measurement)}
        domain = self.layout.domain
        values = tuple(p.unweighted_answer(marginal_for(domain, table, p.attributes)) for p in self.workload.products)
        return Answers(values, self.query_variances())


def _root_at_least(square: int) -> float:
    """The least float whose square is at least the integer ``square`` (Δ₂ from the exact column norm²)."""
    root = math.sqrt(square)
    while root * root < square:
        root = math.nextafter(root, math.inf)
    return root


# --------------------------------------------------------------------------------------------------
# Choosing the factors.
# --------------------------------------------------------------------------------------------------


def sub_weights(layout: KroneckerLayout, attribute: str, traces: list[dict[str, float]]) -> list[float]:
    """``w_p² ‖W_{p,O}‖²_F Π_{b≠a} tr_b`` per product."""
    return [
        p.weight**2 * layout.other_mass(p) * math.prod(t[b] for b in layout.ordered if b != attribute)
        for p, t in zip(layout.workload.products, traces)
    ]


def factor_bits(attributes: int, privacy: Privacy, contributions: int) -> int:
    """Scale bits per factor: ``TOTAL_SCALE_BITS / |T|``, or fewer so that the noise parameter
    ``k Π‖·‖₁/ε ≤ MAX_LAPLACE_SCALE`` or ``k² Π‖·‖₂²/(2ρ) ≤ MAX_GAUSSIAN_SIGMA2`` (with rounding slack)."""
    if privacy.is_laplace:
        room = math.log2(MAX_LAPLACE_SCALE * privacy.epsilon / contributions)
    else:
        room = math.log2(MAX_GAUSSIAN_SIGMA2 * 2 * privacy.rho / contributions**2) / 2
    return min(TOTAL_SCALE_BITS, math.floor(room) - ROUNDING_SLACK_BITS) // attributes


def frobenius_traces(layout: KroneckerLayout) -> list[dict[str, float]]:
    """``‖B_{p,a}‖²_F`` per product and ordered attribute: the traces for ``C_a = I``, where alternation starts."""
    return [{a: float(row_norms2(layout.block(p, a)).sum()) for a in layout.ordered} for p in layout.workload.products]


def kronecker_candidate(layout: KroneckerLayout, privacy: Privacy, contributions: int = 1) -> KroneckerCandidate | None:
    """Factors by alternation (see the module doc), keeping the round with the least exact error."""
    bits = factor_bits(len(layout.ordered), privacy, contributions)
    if bits < MIN_FACTOR_BITS:
        return None
    build = factor_builder(privacy, bits)
    sensitivity = Sensitivity(contributions)
    traces = frobenius_traces(layout)
    best: KroneckerCandidate | None = None
    for _ in range(ALTERNATION_ROUNDS):
        subs = {a: layout.sub_workload(a, sub_weights(layout, a, traces)) for a in layout.ordered}
        if any(sub is None for sub in subs.values()):
            return best
        try:
            candidate = KroneckerCandidate(layout, privacy, sensitivity, {a: build(sub) for a, sub in subs.items()})
            error = candidate.expected_error()
        except (np.linalg.LinAlgError, NoiseParameterError):  # a rank-deficient rounding; noise beyond the sampler
            return best
        if best is not None and not error < best.expected_error():
            return best
        best = candidate
        traces = [{a: candidate.product_trace(p, a) for a in layout.ordered} for p in layout.workload.products]
    return best


def candidates(workload: Workload, privacy: Privacy, contributions: int = 1) -> list[Candidate]:
    """A Kronecker range strategy when at least two ordered attributes carry range blocks."""
    layout = kronecker_layout(workload)
    if layout is None:
        return []
    candidate = kronecker_candidate(layout, privacy, contributions)
    return [] if candidate is None else [candidate]

