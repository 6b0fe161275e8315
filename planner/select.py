"""Candidate generation, the choice of strategy, and the SVD lower bound (docs/math.md §7).

Every family is a function ``(workload, privacy, contributions) -> list[Candidate]``; the selector asks
all of them (identity, marginals, Fourier, residual, hierarchies, eigen-designs, hats, ridge pairs,
Kronecker ranges, composites — the list in :func:`all_candidates` is the one registry) and keeps the consistent candidate with the least exact expected error.

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

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner import caches, noise
from planner.budget import Sensitivity
from planner.domain import Domain
from planner.noise import NoiseParameterError
from planner.privacy import Privacy
from planner.strategies import (
    composite,
    direct,
    eigen,
    fourier,
    hats,
    hierarchy,
    identity,
    kronecker,
    marginals,
    residual,
    ridge,
)
from planner.strategies.base import Candidate
from planner.workload import AllRange, Block, Identity, Prefix, Product, Total, Workload

Family = Callable[[Workload, Privacy, int], list[Candidate]]

MAX_EIGEN_SIZE = 4096  # largest attribute whose Gram blocks are diagonalised densely
MAX_MARGINAL_SPACE = 1500  # most marginal cells (over maximal attribute sets) of the dense fallback: ≲ 1 s
MAX_FACTOR_ENTRIES = 2**22  # marginal-type families need each factor block densely (rows × cells)
MAX_BASIS_SIZE = 4096  # ... and a dense basis of each attribute (cells × cells)


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
    """Whether marginal-type families can take the workload: each factor block densely, and each attribute
    a Helmert basis (``size × size``: a range of 500,001 values cannot, even under a one-row predicate)."""
    return all(
        f.block.rows * f.block.size <= MAX_FACTOR_ENTRIES and f.block.size <= MAX_BASIS_SIZE for p in workload.products for f in p.factors
    )


def candidates_or_empty(workload: Workload, privacy: Privacy, contributions: int, distinct_cells: bool) -> list[Candidate]:
    """The whole search over a sub-workload, for the composite family's parts (empty when none applies)."""
    try:
        return all_candidates(workload, privacy, contributions, distinct_cells)
    except NoCandidateError:
        return []


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
    families = own + [
        hierarchy.candidates,
        eigen.candidates,
        hats.candidates,
        ridge.candidates,
        kronecker.candidates,
        lambda w, p, k: composite.candidates(w, p, k, distinct_cells, candidates_or_empty),
    ]
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


def _distinct_blocks(workload: Workload, per_product: list[dict[str, Block]]) -> dict[str, tuple[Block | None, ...]]:
    """Per attribute, its distinct blocks in order of first appearance over the products (None where a
    product sums the attribute out), without a pass over every attribute of every product."""
    first: dict[str, dict[Block | None, int]] = {a: {} for a in workload.domain.attributes}
    readers: dict[str, list[int]] = {a: [] for a in workload.domain.attributes}
    for index, blocks in enumerate(per_product):
        for attribute, block in blocks.items():
            first[attribute].setdefault(block, index)
            readers[attribute].append(index)
    for attribute, indices in readers.items():
        gap = next((i for i, j in enumerate(indices) if i != j), len(indices))  # the first product not reading it
        if gap < len(per_product):
            first[attribute][None] = gap
    return {a: tuple(sorted(found, key=found.__getitem__)) for a, found in first.items()}


@functools.lru_cache(maxsize=1024)
def _attribute_spectrum(size: int, distinct: tuple[Block | None, ...]) -> _AttributeSpectrum:
    """The spectrum of an attribute's distinct blocks (memoized: equal attributes share one object)."""
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
    distinct = _distinct_blocks(workload, per_product)
    spectra = [_attribute_spectrum(domain.size_of(a), distinct[a]) for a in domain.attributes]
    classes = _product_classes(workload, per_product, spectra)
    if classes is None:
        return 0.0
    unique, inverse, multiplicity = _class_table(classes)
    eigenvalues = np.bincount(inverse, weights=np.concatenate([values for _, _, values, _ in classes]))
    return float(np.sum(multiplicity * np.sqrt(np.maximum(eigenvalues, 0.0))))


def _partly_structured_singular_value_sum(workload: Workload) -> float:
    """Attributes whose blocks commute are diagonalised as in the structured case; the others (``N``,
    e.g. ranges on an attribute other products sum out) stay dense: on each joint eigen-class ``k`` of
    the commuting attributes ``WᵀW`` acts as ``M_k = Σ_P c_P(k) ⊗_{a∈N} G_{P,a}`` with ``c_P(k)`` the
    product's weight² times its class eigenvalues, so ``Σσ = Σ_k |k| tr(M_k^{1/2})`` — one dense
    eigenproblem over the cells of ``N`` per distinct coefficient vector ``c(k)``."""
    domain = workload.domain
    per_product = [{f.attributes[0]: f.block for f in p.factors} for p in workload.products]
    distinct = _distinct_blocks(workload, per_product)
    spectra: list[_AttributeSpectrum] = []
    dense: list[str] = []
    for attribute in domain.attributes:
        size = domain.size_of(attribute)
        try:
            spectra.append(_attribute_spectrum(size, distinct[attribute]))
        except BoundUnavailableError:
            dense.append(attribute)
            spectra.append(_AttributeSpectrum({b: np.ones(1) for b in distinct[attribute]}, np.ones(1, dtype=int)))
    cells = math.prod(domain.shape(dense))
    if not dense or cells > MAX_MARGINAL_SPACE:
        raise BoundUnavailableError(f"the non-commuting attributes {dense} have {cells} cells (at most {MAX_MARGINAL_SPACE})")
    classes = _product_classes(workload, per_product, spectra)
    if classes is None:
        return 0.0
    unique, inverse, multiplicity = _class_table(classes)
    coefficients = np.zeros((len(unique), len(workload.products)))
    offset = 0
    for index, keys, values, _ in classes:
        coefficients[inverse[offset : offset + len(keys)], index] = values
        offset += len(keys)
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


ClassKey = tuple[tuple[int, ...], int]
"""A joint eigen-class: the attributes (positions) away from their default class, and their classes
there in mixed radix (the first attribute varying fastest)."""
ProductClasses = list[tuple[int, list[ClassKey], np.ndarray, np.ndarray]]
"""Per product with a nonzero Gram: its index, the classes where it is nonzero, ``w² Π_a λ`` there,
and the multiplicity of each of those classes."""


def _default_classes(spectra: list[_AttributeSpectrum]) -> list[tuple[int, float | None]]:
    """Per attribute, the class a summed-out attribute sits in (the constant vector's: the only class on
    which ``11ᵀ`` is nonzero) and its eigenvalue there (None when no product sums the attribute out).
    Keys name only the attributes away from their default class, so a product enumerates the classes of
    the attributes it reads, never the joint classes of the whole domain."""
    defaults: list[tuple[int, float | None]] = []
    for spectrum in spectra:
        summed = spectrum.eigenvalues.get(None)
        if summed is None:
            defaults.append((0, None))
            continue
        support = np.flatnonzero(np.abs(summed) > 1e-12 * max(1.0, float(np.abs(summed).max())))
        if support.size > 1:
            raise BoundUnavailableError("a summed-out attribute spans several eigen-classes")
        defaults.append((int(support[0]), float(summed[support[0]])) if support.size else (0, 0.0))
    return defaults


def _product_classes(
    workload: Workload, per_product: list[dict[str, Block]], spectra: list[_AttributeSpectrum]
) -> ProductClasses | None:
    """Per product, the joint eigen-classes on which its Gram is nonzero, ``w² Π_a λ`` and the class
    multiplicities there (see :data:`ProductClasses`); None when every product is zero."""
    defaults = _default_classes(spectra)
    position_of = {a: i for i, a in enumerate(workload.domain.attributes)}
    summed_out = [value for _, value in defaults if value is not None]
    zero_sums = sum(value == 0 for value in summed_out)  # attributes whose summed-out eigenvalue is 0
    all_summed = math.prod(value for value in summed_out if value != 0)
    base_multiplicity = math.prod(float(s.multiplicity[d]) for s, (d, _) in zip(spectra, defaults))
    shapes: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, ReadKeys]] = {}
    found: ProductClasses = []
    for index, (product, blocks) in enumerate(zip(workload.products, per_product)):
        read = sorted(position_of[a] for a in blocks)
        read_sums = [defaults[p][1] for p in read if defaults[p][1] is not None]
        if zero_sums > sum(value == 0 for value in read_sums):
            continue  # an attribute it sums out has a zero eigenvalue there: its Gram is zero
        attributes = workload.domain.attributes
        shape = tuple((id(spectra[p]), blocks[attributes[p]], defaults[p][0]) for p in read)
        if shape not in shapes:
            shapes[shape] = _read_classes([spectra[p] for p in read], [blocks[attributes[p]] for p in read],
                                          [defaults[p][0] for p in read])
        values, multiplicity, template = shapes[shape]
        if not values.any():
            continue
        scale = product.weight**2 * all_summed / math.prod(v for v in read_sums if v != 0)
        chosen, which, codes = template
        named = [tuple(read[i] for i in c) for c in chosen]
        keys = [(named[k], code) for k, code in zip(which, codes)]
        found.append((index, keys, scale * values, base_multiplicity * multiplicity))
    return found or None


ReadKeys = tuple[list[tuple[int, ...]], list[int], list[int]]
"""Class keys by position among a product's read attributes: the distinct sets of positions away from
their default class, which of them each joint class has, and each joint class's code (:data:`ClassKey`)."""


def _read_classes(
    spectra: list[_AttributeSpectrum], blocks: list[Block], defaults: list[int]
) -> tuple[np.ndarray, np.ndarray, ReadKeys]:
    """For a product reading attributes with these spectra and blocks: ``Π_a λ_a`` on every joint class
    of the read attributes where it is nonzero, each class's multiplicity relative to the default
    classes, and the classes' keys (:data:`ReadKeys`)."""
    values, multiplicity = np.ones(1), np.ones(1)
    classes: list[np.ndarray] = []  # the class of each read attribute, per joint class (C order)
    for spectrum, block, default in zip(spectra, blocks, defaults):
        eigen = spectrum.eigenvalues[block]
        support = np.flatnonzero(np.abs(eigen) > 1e-12 * max(1.0, float(np.abs(eigen).max())))
        values = np.multiply.outer(values, eigen[support]).ravel()
        multiplicity = np.multiply.outer(multiplicity, spectrum.multiplicity[support] / spectrum.multiplicity[default]).ravel()
        classes = [np.repeat(c, support.size) for c in classes] + [np.tile(support, values.size // support.size)]
    counts = [len(spectrum.multiplicity) for spectrum in spectra]
    exact = np.int64 if math.prod(counts) < 2**62 and len(classes) < 62 else object  # codes must not overflow
    code, stride, pattern = np.zeros(values.size, dtype=exact), np.ones(values.size, dtype=exact), np.zeros(values.size, dtype=exact)
    for i, (c, count, default) in enumerate(zip(classes, counts, defaults)):
        away = c != default
        code = code + np.where(away, c * stride, 0)
        stride = np.where(away, stride * count, stride)
        pattern = pattern + np.where(away, 1 << i, 0)
    patterns, which = np.unique(pattern, return_inverse=True)
    chosen = [tuple(i for i in range(len(classes)) if int(bits) >> i & 1) for bits in patterns.tolist()]
    return values, multiplicity, (chosen, which.ravel().tolist(), code.tolist())


def _class_table(classes: ProductClasses) -> tuple[list[ClassKey], np.ndarray, np.ndarray]:
    """The distinct class keys, each key's position among them, and each distinct class's multiplicity."""
    positions: dict[ClassKey, int] = {}
    inverse = np.fromiter(
        (positions.setdefault(key, len(positions)) for _, keys, _, _ in classes for key in keys), dtype=np.int64
    )
    multiplicity = np.zeros(len(positions))
    multiplicity[inverse] = np.concatenate([m for _, _, _, m in classes])  # equal for equal keys
    return list(positions), inverse, multiplicity


def svd_bound(workload: Workload, privacy: Privacy, contributions: int = 1, distinct_cells: bool = False) -> float:
    """docs/math.md §7: Li & Miklau's SVD bound for *continuous* noise, ``(Σσ)²/n`` times the variance
    of the least noise one row can get (``2k²/ε²`` Laplace, ``k²/(2ρ)`` zCDP, ``k`` for ``k²`` under
    zCDP when a unit's rows are in distinct cells) — the yardstick of the papers (HDMM's ratios). The
    planner's discrete noise has less variance than the continuous one, so a plan can go below it: what
    no plan can go below is :func:`lower_bound`."""
    return singular_value_sum(workload) ** 2 / workload.domain.size * least_row_variance(privacy, contributions, distinct_cells)


def lower_bound(workload: Workload, privacy: Privacy, contributions: int = 1, distinct_cells: bool = False) -> float:
    """docs/math.md §7: the least expected total squared error of any strategy with integer rows measured
    with the planner's discrete noise (independent discrete Laplace or Gaussian per group, or discrete
    ridge pairs), ``(Σσ)²/n`` times the *discrete* variance of the least noise one row can get."""
    return singular_value_sum(workload) ** 2 / workload.domain.size * least_row_variance(privacy, contributions, distinct_cells, discrete=True)


def least_row_variance(privacy: Privacy, contributions: int = 1, distinct_cells: bool = False, discrete: bool = False) -> float:
    """The noise variance of a row of magnitude 1 given the whole budget (no row of an integer strategy
    can get less): continuous (``2b²``, ``σ²``) or that of the discrete law at that parameter — at least
    the sampler's smallest, to which it raises every smaller one (``planner.noise``)."""
    sensitivity = Sensitivity(contributions, distinct_cells)
    if privacy.is_laplace:
        scale = sensitivity.laplace_scale(1.0, privacy.epsilon)
        if not discrete:
            return 2.0 * scale**2
        return float(noise.discrete_laplace_variance(max(scale, noise.MIN_LAPLACE_SCALE), as_sampled=False))
    sigma2 = sensitivity.gaussian_sigma2(1.0, privacy.rho, True)
    if not discrete:
        return sigma2
    return float(noise.discrete_gaussian_variance(max(sigma2, noise.MIN_GAUSSIAN_SIGMA2), as_sampled=False))


caches.register(_attribute_spectrum.cache_clear)
