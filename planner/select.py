"""Candidate generation, the choice of strategy, and the SVD lower bound (MATH.md §7).

Every family is a function ``(workload, privacy, contributions) -> list[Candidate]``; the selector asks
all of them (identity, marginals, Fourier, residual, hierarchies, eigen-designs, and whatever is registered in
:data:`FAMILIES`) and keeps the consistent candidate with the least exact expected error.

The SVD bound needs ``Σσ_i(W)`` without densifying ``W``: per attribute, the Gram blocks of all products
(``I`` for GROUP BY, ``11ᵀ`` for summed-out attributes, the block's own Gram otherwise) are diagonalised
in one common eigenbasis when they commute; eigenvectors on which every block has the same eigenvalue
form a *class*. ``WᵀW = Σ_P w_P² ⊗_a G_{P,a}`` is then diagonal with eigenvalue
``Σ_P w_P² Π_a λ_{P,a}(class_a)`` of multiplicity ``Π_a |class_a|`` — for marginals the classes are the
constant vector and its complement, giving ResidualPlanner's subset formula; a prefix or all-range block
(alone on its attribute but for GROUP BY) uses its closed-form spectrum (``planner.strategies.eigen``).

When blocks on some attributes ``N`` do not commute (ranges on an attribute that another product sums
out) and ``N`` has at most ``MAX_MARGINAL_SPACE`` cells, the other attributes are still diagonalised and
``N`` is kept dense: on each joint class ``k`` of the others ``WᵀW`` is ``Σ_P c_P(k) ⊗_{a∈N} G_{P,a}``,
one small eigenproblem per distinct coefficient vector. Products with multi-attribute factors, or
too many non-commuting cells, go through the *marginal space*: each product reads the marginal on its
attributes, so with ``Π_T`` the summing map onto the marginal on ``T`` and the products grouped under the
maximal attribute sets ``T`` (a product on ``S ⊆ T`` lifted by ``11ᵀ`` on ``T∖S``),
``WᵀW = Σ_T Π_Tᵀ G_T Π_T = FᵀF`` with ``F`` stacking ``G_T^{1/2} Π_T``. The nonzero eigenvalues of
``FᵀF`` are those of ``FFᵀ``, whose ``(T, U)`` block ``G_T^{1/2} (Π_T Π_Uᵀ) G_U^{1/2}`` only involves
marginal cells: ``Π_T Π_Uᵀ`` is the Kronecker product over attributes of ``I`` (in both), a column or a
row of ones (in one) and the attribute's size (in neither). So ``Σσ = tr((FFᵀ)^{1/2})`` costs a dense
eigenproblem of ``Σ_T |T|`` cells, not of the full domain.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.budget import Sensitivity
from planner.domain import Domain
from planner.noise import NoiseParameterError
from planner.privacy import Privacy
from planner.strategies import composite, direct, eigen, fourier, hats, hierarchy, identity, marginals, residual, ridge
from planner.strategies.base import Candidate
from planner.workload import AllRange, Block, Identity, Prefix, Product, Total, Workload

Family = Callable[[Workload, Privacy, int], list[Candidate]]

FAMILIES: list[Family] = []
"""Strategy families registered from other modules (each appends its ``candidates`` function)."""

MAX_EIGEN_SIZE = 4096  # largest attribute whose Gram blocks are diagonalised densely
MAX_MARGINAL_SPACE = 1500  # most marginal cells (over maximal attribute sets) of the dense fallback: ≲ 1 s
MAX_FACTOR_ENTRIES = 2**22  # marginal-type families need each factor block densely (rows × cells)


class NoCandidateError(ValueError):
    """No strategy family can handle the workload."""


class BoundUnavailableError(ValueError):
    """The SVD bound cannot be computed without densifying a large matrix."""


def _own_families(distinct_cells: bool, include_inconsistent: bool) -> list[Family]:
    def with_flag(module: object) -> Family:
        return lambda w, p, k: module.candidates(w, p, k, distinct_cells=distinct_cells)  # type: ignore[attr-defined]

    def padded_fourier(w: Workload, p: Privacy, k: int) -> list[Candidate]:
        return fourier.candidates(w, p, k, include_inconsistent=include_inconsistent)

    return [with_flag(identity), with_flag(marginals), padded_fourier, with_flag(residual)]


def _blocks_are_small(workload: Workload) -> bool:
    return all(f.block.rows * f.block.size <= MAX_FACTOR_ENTRIES for p in workload.products for f in p.factors)


def all_candidates(
    workload: Workload,
    privacy: Privacy,
    contributions: int = 1,
    distinct_cells: bool = False,
    include_inconsistent: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> list[Candidate]:
    """Every candidate of every applicable family; ``include_inconsistent`` adds bit-encoded Fourier on
    padded attributes (never chosen, see ``CoefficientCandidate.consistent``; benchmarks report it).
    ``progress`` is called as ``progress(families_done, families_total)`` after each family."""
    Sensitivity(contributions, distinct_cells)  # validates
    # marginal-type families need every factor block densely; without them, the summed identity (no
    # basis, any block size) keeps every workload of implicit blocks answerable
    own = _own_families(distinct_cells, include_inconsistent) if _blocks_are_small(workload) else [
        lambda w, p, k: direct.candidates(w, p, k, distinct_cells)
    ]
    families = own + [hierarchy.candidates, eigen.candidates, hats.candidates, ridge.candidates, *FAMILIES, lambda w, p, k: composite.candidates(w, p, k, distinct_cells)]
    found: list[Candidate] = []
    out_of_range: list[NoiseParameterError] = []
    for done, family in enumerate(families, start=1):
        try:
            found.extend(family(workload, privacy, contributions))
        except NoiseParameterError as error:  # its integer rows would need noise beyond the exact samplers
            out_of_range.append(error)
        if progress is not None:
            progress(done, len(families))
    if not found:
        if out_of_range:
            raise NoCandidateError(
                f"no strategy can add exact discrete noise at {privacy}: the noise would be too large to"
                f" sample ({out_of_range[0]}); use a larger budget"
            )
        raise NoCandidateError(
            "no strategy can answer this workload: its marginals or query blocks are too large to plan;"
            " group by fewer or coarser columns"
        )
    return found


TIE_TOLERANCE = 1e-9  # expected errors this close (relatively) are a tie, won by the earlier family


def choose(candidates: list[Candidate]) -> Candidate:
    """The consistent candidate with the least exact expected error. Ties (within :data:`TIE_TOLERANCE`,
    as when a hierarchy collapses to the identity) go to the first in family order — the simplest, which
    also keeps what only marginal-type strategies offer (re-use, non-negative answers) — rather than to
    whichever rounding made a hair smaller."""
    eligible = [c for c in candidates if getattr(c, "consistent", True)]
    if not eligible:
        raise NoCandidateError("no strategy gives consistent answers for this workload")
    least = min(c.expected_error() for c in eligible)
    return next(c for c in eligible if c.expected_error() <= least * (1 + TIE_TOLERANCE))


# --------------------------------------------------------------------------------------------------
# SVD bound.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _AttributeSpectrum:
    """Eigenvalue of each distinct Gram block per eigen-class, and the class sizes."""

    eigenvalues: dict[Block | None, np.ndarray]  # key None = summed out (11ᵀ)
    multiplicity: np.ndarray


def _attribute_spectrum(size: int, blocks: list[Block | None]) -> _AttributeSpectrum:
    distinct = list(dict.fromkeys(blocks))
    if all(b is None or isinstance(b, (Identity, Total)) for b in distinct):
        values = {b: (np.array([1.0, 1.0]) if isinstance(b, Identity) else np.array([float(size), 0.0])) for b in distinct}
        return _AttributeSpectrum(values, np.array([1, size - 1]))
    others = [b for b in distinct if not isinstance(b, Identity)]
    if len(others) == 1 and isinstance(others[0], (Prefix, AllRange)):  # closed-form range spectrum
        spectrum = eigen.range_gram_eigenvalues(others[0])
        values = {b: (spectrum if b is others[0] else np.ones(size)) for b in distinct}
        return _AttributeSpectrum(values, np.ones(size, dtype=int))
    if size > MAX_EIGEN_SIZE:
        raise BoundUnavailableError(f"an attribute of size {size} is too large to diagonalise its query blocks")
    grams = [np.ones((size, size)) if b is None else b.gram() for b in distinct]
    for i, first in enumerate(grams):
        for second in grams[i + 1 :]:
            if not np.allclose(first @ second, second @ first, atol=1e-8 * size * size):
                raise BoundUnavailableError("the workload's query blocks on one attribute do not commute")
    weights = np.random.default_rng(0).uniform(1, 2, size=len(grams))  # generic: splits no shared eigenspace
    combination = sum(w * g for w, g in zip(weights, grams))
    _, vectors = np.linalg.eigh(combination)
    diagonals = np.array([np.einsum("ij,ik,kj->j", vectors, g, vectors) for g in grams])  # grams × eigenvectors
    scale = max(1.0, float(np.abs(diagonals).max()))
    keys, inverse, counts = np.unique(np.round(diagonals.T / scale, 9), axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    values = {b: np.array([diagonals[i][inverse == c].mean() for c in range(len(keys))]) for i, b in enumerate(distinct)}
    return _AttributeSpectrum(values, counts)


def singular_value_sum(workload: Workload) -> float:
    """``Σ_i σ_i(W)`` by Kronecker structure, else in the marginal space (see the module docstring)."""
    domain = workload.domain
    if not domain.attributes:  # one cell (e.g. COUNT(*) with its WHERE applied in SQL): W is the column of weights
        return math.sqrt(sum(p.weight**2 for p in workload.products))
    if all(len(f.attributes) == 1 for p in workload.products for f in p.factors):
        for method in (_structured_singular_value_sum, _partly_structured_singular_value_sum):
            try:
                return method(workload)
            except BoundUnavailableError:
                pass
    return _marginal_space_singular_value_sum(workload)


def _product_gram(product: Product, attributes: tuple[str, ...]) -> np.ndarray:
    """``w² Π_{S→T}ᵀ G_P Π_{S→T}``: the product's weighted Gram lifted to the marginal on ``attributes``."""
    domain = product.domain
    gram = np.full((1, 1), product.weight**2)
    scope: list[str] = []
    for factor in product.factors:
        gram = np.kron(gram, factor.block.gram())
        scope.extend(factor.attributes)
    for attribute in attributes:
        if attribute not in scope:
            gram = np.kron(gram, np.ones((domain.size_of(attribute),) * 2))
            scope.append(attribute)
    shape = domain.shape(scope)
    order = [scope.index(a) for a in attributes]
    tensor = gram.reshape(shape + shape).transpose(order + [len(shape) + i for i in order])
    cells = math.prod(shape)
    return tensor.reshape(cells, cells)


def _summing_overlap(domain: Domain, rows: tuple[str, ...], columns: tuple[str, ...]) -> np.ndarray:
    """``Π_T Π_Uᵀ`` between the marginals on ``rows`` (T) and ``columns`` (U)."""
    overlap = np.ones((1, 1))
    for attribute in domain.attributes:
        size = domain.size_of(attribute)
        in_rows, in_columns = attribute in rows, attribute in columns
        if in_rows and in_columns:
            overlap = np.kron(overlap, np.eye(size))
        elif in_rows or in_columns:
            overlap = np.kron(overlap, np.ones((size, 1) if in_rows else (1, size)))
        else:
            overlap = overlap * size
    return overlap


def _marginal_space_singular_value_sum(workload: Workload) -> float:
    domain = workload.domain
    scopes = {p.attributes for p in workload.products}
    maximal = sorted(t for t in scopes if not any(set(t) < set(u) for u in scopes))
    union = domain.canonical(a for t in scopes for a in t)
    cells = sum(math.prod(domain.shape(t)) for t in maximal)
    if cells > math.prod(domain.shape(union)):  # one marginal holding every product is smaller
        maximal, cells = [union], math.prod(domain.shape(union))
    if cells > MAX_MARGINAL_SPACE:
        raise BoundUnavailableError(
            f"the SVD bound needs a dense eigenproblem over {cells} marginal cells (at most {MAX_MARGINAL_SPACE})"
        )
    grams: dict[tuple[str, ...], np.ndarray] = {}
    for product in workload.products:
        owner = next(t for t in maximal if set(product.attributes) <= set(t))
        grams[owner] = grams.get(owner, 0.0) + _product_gram(product, owner)
    roots = {}
    for scope, gram in grams.items():
        values, vectors = np.linalg.eigh(gram)
        roots[scope] = (vectors * np.sqrt(_without_rounding_noise(values))) @ vectors.T
    stacked = np.block([[roots[t] @ _summing_overlap(domain, t, u) @ roots[u] for u in maximal] for t in maximal])
    return float(np.sqrt(_without_rounding_noise(np.linalg.eigvalsh(stacked))).sum())


def _without_rounding_noise(eigenvalues: np.ndarray) -> np.ndarray:
    """Eigenvalues of a PSD matrix with those at rounding level set to 0 (their square roots would
    otherwise add ``√(10⁻¹⁶ λ_max)`` each)."""
    floor = eigenvalues.size * np.finfo(float).eps * max(float(np.abs(eigenvalues).max(initial=0.0)), 1e-300)
    return np.where(eigenvalues > floor, eigenvalues, 0.0)


def _structured_singular_value_sum(workload: Workload) -> float:
    domain = workload.domain
    per_product = [{f.attributes[0]: f.block for f in p.factors} for p in workload.products]
    spectra = [_attribute_spectrum(domain.size_of(a), [blocks.get(a) for blocks in per_product]) for a in domain.attributes]
    classes = _product_classes(workload, per_product, spectra)
    if classes is None:
        return 0.0
    unique, inverse, multiplicity = _class_table(classes, spectra)
    eigenvalues = np.bincount(inverse, weights=np.concatenate([values for _, _, values in classes]))
    return float(np.sum(multiplicity * np.sqrt(np.maximum(eigenvalues, 0.0))))


def _partly_structured_singular_value_sum(workload: Workload) -> float:
    """Attributes whose blocks commute are diagonalised as in the structured case; the others (``N``,
    e.g. ranges on an attribute other products sum out) stay dense: on each joint eigen-class ``k`` of
    the commuting attributes ``WᵀW`` acts as ``M_k = Σ_P c_P(k) ⊗_{a∈N} G_{P,a}`` with ``c_P(k)`` the
    product's weight² times its class eigenvalues, so ``Σσ = Σ_k |k| tr(M_k^{1/2})`` — one dense
    eigenproblem over the cells of ``N`` per distinct coefficient vector ``c(k)``."""
    domain = workload.domain
    per_product = [{f.attributes[0]: f.block for f in p.factors} for p in workload.products]
    spectra: list[_AttributeSpectrum] = []
    dense: list[str] = []
    for attribute in domain.attributes:
        size = domain.size_of(attribute)
        try:
            spectra.append(_attribute_spectrum(size, [blocks.get(attribute) for blocks in per_product]))
        except BoundUnavailableError:
            dense.append(attribute)
            spectra.append(_AttributeSpectrum({b.get(attribute): np.ones(1) for b in per_product}, np.ones(1, dtype=int)))
    cells = math.prod(domain.shape(dense))
    if not dense or cells > MAX_MARGINAL_SPACE:
        raise BoundUnavailableError(f"the non-commuting attributes {dense} have {cells} cells (at most {MAX_MARGINAL_SPACE})")
    classes = _product_classes(workload, per_product, spectra)
    if classes is None:
        return 0.0
    unique, inverse, multiplicity = _class_table(classes, spectra)
    coefficients = np.zeros((unique.size, len(workload.products)))
    offset = 0
    for index, keys, values in classes:
        coefficients[inverse[offset : offset + keys.size], index] = values
        offset += keys.size
    rows, row_of_class = np.unique(coefficients, axis=0, return_inverse=True)
    weights = np.bincount(row_of_class.ravel(), weights=multiplicity)
    grams = []
    for blocks in per_product:
        gram = np.ones((1, 1))
        for attribute in dense:
            block = blocks.get(attribute)
            size = domain.size_of(attribute)
            gram = np.kron(gram, np.ones((size, size)) if block is None else block.gram())
        grams.append(gram)
    total = 0.0
    for row, weight in zip(rows, weights):
        matrix = sum(c * g for c, g in zip(row, grams) if c != 0)
        total += weight * float(np.sqrt(_without_rounding_noise(np.linalg.eigvalsh(matrix))).sum())
    return total


ProductClasses = list[tuple[int, np.ndarray, np.ndarray]]  # (product index, class keys, coefficients)


def _product_classes(
    workload: Workload, per_product: list[dict[str, Block]], spectra: list[_AttributeSpectrum]
) -> ProductClasses | None:
    """Per product, the joint eigen-classes on which its Gram is nonzero (flat keys) and ``w² Π_a λ``
    there; None when there are too many classes, an empty list when every product is zero."""
    class_counts = [len(s.multiplicity) for s in spectra]
    if math.prod(class_counts) >= 2**62:
        raise BoundUnavailableError("too many eigen-classes to enumerate")
    found: ProductClasses = []
    for index, (product, blocks) in enumerate(zip(workload.products, per_product)):
        supports, factors = [], []
        for attribute, spectrum in zip(workload.domain.attributes, spectra):
            eigen = spectrum.eigenvalues[blocks.get(attribute)]
            support = np.flatnonzero(np.abs(eigen) > 1e-12 * max(1.0, float(np.abs(eigen).max())))
            supports.append(support)
            factors.append(eigen[support])
        if any(support.size == 0 for support in supports):
            continue
        grids = np.meshgrid(*supports, indexing="ij")
        value = product.weight**2
        for factor in factors:
            value = np.multiply.outer(value, factor)
        found.append((index, np.ravel_multi_index([g.ravel() for g in grids], class_counts), np.asarray(value).ravel()))
    return found or None


def _class_table(classes: ProductClasses, spectra: list[_AttributeSpectrum]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct class keys, each key's position among them, and each distinct class's multiplicity."""
    unique, inverse = np.unique(np.concatenate([keys for _, keys, _ in classes]), return_inverse=True)
    multiplicity = np.ones(unique.size)
    for spectrum, index in zip(spectra, np.unravel_index(unique, [len(s.multiplicity) for s in spectra])):
        multiplicity *= spectrum.multiplicity[index]
    return unique, inverse.ravel(), multiplicity


def svd_bound(workload: Workload, privacy: Privacy, contributions: int = 1, distinct_cells: bool = False) -> float:
    """MATH.md §7: the least total squared error any strategy can reach under this privacy spec
    (``2k²(Σσ)²/(nε²)`` for Laplace, ``k²(Σσ)²/(2ρn)`` for zCDP; ``k`` instead of ``k²`` for zCDP when a
    unit's rows are in distinct cells)."""
    sensitivity = Sensitivity(contributions, distinct_cells)
    total = singular_value_sum(workload) ** 2 / workload.domain.size
    if privacy.is_laplace:
        return 2 * sensitivity.rows**2 * total / privacy.epsilon**2
    return sensitivity.gaussian_sigma2(1.0, privacy.rho, True) * total
