"""Range spectra (for the SVD bound) and the near-optimal eigen-design for ranges under zCDP.

Spectra (MATH.md §7). ``AllRange``'s Gram ``G_uv = (min(u,v)+1)(n−max(u,v))`` is ``n+1`` times the
covariance of a discrete Brownian bridge: ``G⁻¹ = tridiag(−1, 2, −1)/(n+1)``, eigenvectors are the DST-I
sines ``√(2/(n+1)) sin(π(u+1)k/(n+1))`` and eigenvalues ``(n+1)/(2 − 2cos(πk/(n+1)))``, ``k = 1..n``.
``Prefix``'s Gram ``n − max(u,v)`` is, with ``i = n − u``, the Brownian-motion covariance ``min(i, i')``:
its inverse is ``tridiag(−1, 2, −1)`` with last diagonal entry 1, eigenvectors
``√(4/(2n+1)) sin(π i (2k−1)/(2n+1))`` and eigenvalues ``1/(2 − 2cos((2k−1)π/(2n+1)))``. Both bases are
applied in ``O(n log n)`` by ``scipy.fft.dst`` (type I; the prefix basis is the odd half of a DST-I of
length ``2n``).

Eigen-design (Gaussian only). The SVD bound is ``(Σσ)²/(2ρn)``; a strategy with ``SᵀS = D G^{1/2} D``
and unit columns (``d_j = (G^{1/2})_jj^{−1/2}``) has error ``tr(G D⁻¹G^{−1/2}D⁻¹)/(2ρ)``, within a few
percent of the bound for ranges (``D = I`` is exactly optimal when ``G^{1/2}`` has a constant diagonal).
``S = G^{1/4} D`` is real: it is scaled so that its largest entry is ``2^SCALE_BITS`` and rounded to an
integer matrix ``S'`` (noise only ever goes on integer rows); ``Δ₂`` is the exact largest column norm of
``S'`` and GLS solves ``S' x̂ = y`` exactly (preconditioned by the structured inverse of the unrounded
``S``). Reported variances are those of the unrounded design at the same scale: rounding changes them
by a relative amount of order ``2^−SCALE_BITS`` (tested against the dense exact value: below 1e-6).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import fft

from planner.budget import GroupNoise, Sensitivity, noise_for_group, sample_noise
from planner.privacy import Privacy
from planner.strategies.base import Candidate, GroupBudget, Measurement
from planner.strategies.ranges import (
    DenseCovariance,
    RangeCandidate,
    RangeLayout,
    range_layouts,
    row_blocks,
)
from planner.workload import AllRange, Block, Identity, Prefix, Workload

SCALE_BITS = 24  # largest entry of the integer strategy S' (column norms² stay exact in int64 for n ≤ 2^14)
MAX_SIZE = 4096  # the integer strategy is a dense n × n matrix (and n ≤ 2^14 keeps its norms exact)
MAX_MULTIPLY = 2**31  # n² × other cells: integer products computed per measurement
REFINEMENT_STEPS = 8
GROUP = "eigen rows"


def range_gram_eigenvalues(block: Block) -> np.ndarray:
    """Eigenvalues of ``BᵀB`` for a ``Prefix`` or ``AllRange`` block, in closed form (ascending)."""
    n = block.size
    k = np.arange(n, 0, -1)
    if isinstance(block, AllRange):
        return (n + 1) / (2 - 2 * np.cos(np.pi * k / (n + 1)))
    if isinstance(block, Prefix):
        return 1 / (2 - 2 * np.cos((2 * k - 1) * np.pi / (2 * n + 1)))
    raise TypeError(f"closed-form spectra exist for Prefix and AllRange blocks, not {type(block).__name__}")


@dataclass(frozen=True, eq=False)
class ToeplitzMinusHankel:
    """The symmetric ``n × n`` matrix ``M_ij = toeplitz[n − 1 − i + j] − hankel[i + j]``, stored as its two
    generating vectors (length ``2n − 1``): any row block or the diagonal costs only its own size."""

    toeplitz: np.ndarray
    hankel: np.ndarray

    @property
    def size(self) -> int:
        return (self.toeplitz.size + 1) // 2

    def diagonal(self) -> np.ndarray:
        return self.toeplitz[self.size - 1] - self.hankel[0::2]

    @cached_property
    def _windows(self) -> tuple[np.ndarray, np.ndarray]:
        """Row ``i`` of the Toeplitz part and of the Hankel part, as strided views of the two vectors."""
        n = self.size
        windows = np.lib.stride_tricks.sliding_window_view
        return windows(self.toeplitz, n)[::-1], windows(self.hankel, n)

    def rows(self, start: int, stop: int) -> np.ndarray:
        """``M[start:stop]`` (a new array)."""
        toeplitz, hankel = self._windows
        return np.subtract(toeplitz[start:stop], hankel[start:stop])

    def dense(self) -> np.ndarray:
        return self.rows(0, self.size)


# --------------------------------------------------------------------------------------------------
# The two sine bases, applied along axis 0 (columns are independent vectors).
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SineBasis:
    """Orthonormal eigenvectors ``V`` of the unit Gram of one range block kind, with eigenvalues."""

    kind: type  # AllRange or Prefix
    size: int

    @property
    def eigenvalues(self) -> np.ndarray:
        """``λ_k`` in the column order of ``V`` (k = 1..n)."""
        return range_gram_eigenvalues(self.kind(self.size))[::-1]

    def analyse(self, x: np.ndarray) -> np.ndarray:
        """``Vᵀ x``."""
        n = self.size
        if self.kind is AllRange:
            return fft.dst(x, type=1, norm="ortho", axis=0)
        padded = np.zeros((2 * n,) + x.shape[1:])
        padded[:n] = x[::-1]
        return math.sqrt(2) * fft.dst(padded, type=1, norm="ortho", axis=0)[0::2]

    def synthesise(self, coefficients: np.ndarray) -> np.ndarray:
        """``V c``."""
        n = self.size
        if self.kind is AllRange:
            return fft.dst(coefficients, type=1, norm="ortho", axis=0)
        padded = np.zeros((2 * n,) + coefficients.shape[1:])
        padded[0::2] = coefficients
        return math.sqrt(2) * fft.dst(padded, type=1, norm="ortho", axis=0)[:n][::-1]

    def matrix(self) -> np.ndarray:
        """``V`` densely (columns are eigenvectors, k = 1..n)."""
        n = self.size
        if self.kind is AllRange:
            grid = np.outer(np.arange(1, n + 1), np.arange(1, n + 1)) * (np.pi / (n + 1))
            return math.sqrt(2 / (n + 1)) * np.sin(grid)
        grid = np.outer(np.arange(n, 0, -1), np.arange(1, 2 * n, 2)) * (np.pi / (2 * n + 1))
        return math.sqrt(4 / (2 * n + 1)) * np.sin(grid)

    def function(self, spectrum: np.ndarray) -> ToeplitzMinusHankel:
        """``V diag(spectrum) Vᵀ`` as Toeplitz minus Hankel, from one FFT of length ``O(n)``.

        All ranges: ``(2/(n+1)) Σ_k f_k sin(a_i k) sin(a_j k) = c(i−j) − c(i+j+2)`` with
        ``c(m) = (1/(n+1)) Σ_k f_k cos(π m k/(n+1))``. Prefixes (``i = n − u``, ``N = 2n+1``):
        ``e(i−i') − e(i+i')`` with ``e(m) = (2/N) Σ_k f_k cos(π m (2k−1)/N)``."""
        n = self.size
        if self.kind is AllRange:
            length = 2 * (n + 1)
            series = np.zeros(length)
            series[1 : n + 1] = spectrum
            symbol = np.real(np.fft.ifft(series)) * length / (n + 1)
            hankel = symbol[2 : 2 * n + 1]  # hankel[i + j] = c(i + j + 2)
        else:
            length = 2 * (2 * n + 1)
            series = np.zeros(length)
            series[1 : 2 * n : 2] = spectrum
            symbol = np.real(np.fft.ifft(series)) * length * 2 / (2 * n + 1)
            hankel = symbol[2 * n : 1 : -1]  # hankel[u + v] = e(2n − u − v)
        toeplitz = np.concatenate([symbol[n - 1 : 0 : -1], symbol[:n]])  # toeplitz[n − 1 − i + j] = c(|i − j|)
        return ToeplitzMinusHankel(toeplitz, np.ascontiguousarray(hankel))

    def power(self, x: np.ndarray, spectrum: np.ndarray) -> np.ndarray:
        """``V diag(spectrum) Vᵀ x``."""
        shape = (-1,) + (1,) * (x.ndim - 1)
        return self.synthesise(spectrum.reshape(shape) * self.analyse(x))


# --------------------------------------------------------------------------------------------------
# The design and its covariance.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class EigenDesign:
    """``S = G^{1/4} D`` for ``G = α·(unit Gram of kind) + β·I``, and its integer rounding ``S'``."""

    basis: SineBasis
    spectrum: np.ndarray  # eigenvalues of G in the basis' order

    @cached_property
    def _root(self) -> ToeplitzMinusHankel:
        """``G^{1/4} = V Λ^{1/4} Vᵀ``."""
        return self.basis.function(self.spectrum**0.25)

    @cached_property
    def column_scales(self) -> np.ndarray:
        """``d_j = (G^{1/2})_jj^{−1/2}``: the column norms² of ``G^{1/4}`` are the diagonal of ``G^{1/2}``."""
        return 1 / np.sqrt(self.basis.function(self.spectrum**0.5).diagonal())

    def real_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of ``S = G^{1/4} D`` (unit columns)."""
        rows = self._root.rows(start, stop)
        rows *= self.column_scales
        return rows

    @cached_property
    def scale(self) -> float:
        """``c = 2^SCALE_BITS / max |S_ij|`` (a first pass over the row blocks of ``S``)."""
        largest = 0.0
        for start, stop in row_blocks(self.basis.size):
            rows = self.real_rows(start, stop)
            largest = max(largest, float(rows.max()), -float(rows.min()))
        return 2.0**SCALE_BITS / largest

    @cached_property
    def integer(self) -> np.ndarray:
        """``S' = rint(c S)`` as int64, generated block by block (only ``S'`` itself is ever dense)."""
        n = self.basis.size
        result = np.empty((n, n), dtype=np.int64)
        for start, stop in row_blocks(self.basis.size):
            rows = self.real_rows(start, stop)
            rows *= self.scale
            result[start:stop] = np.rint(rows, out=rows)
        return result

    @cached_property
    def max_column_norm2(self) -> int:
        """``max_j ‖S'_:j‖²``, exactly (entries ≤ 2^24, n ≤ 2^14: the sums fit in int64)."""
        return int(np.einsum("ij,ij->j", self.integer, self.integer).max())

    def apply_inverse_real(self, y: np.ndarray) -> np.ndarray:
        """``(c S)⁻¹ y = c⁻¹ D⁻¹ G^{−1/4} y``."""
        shape = (-1,) + (1,) * (y.ndim - 1)
        return self.basis.power(y, self.spectrum**-0.25) / (self.scale * self.column_scales.reshape(shape))

    def solve(self, y: np.ndarray) -> np.ndarray:
        """``S'⁻¹ y`` by iterative refinement with the structured inverse of ``c S``."""
        x = self.apply_inverse_real(y)
        previous = math.inf
        for _ in range(REFINEMENT_STEPS):
            correction = self.apply_inverse_real(self._residual(y, x))
            x = x + correction
            size = float(np.abs(correction).max(initial=0.0))
            if size >= previous / 2:  # no longer converging: x is as exact as floating point allows
                break
            previous = size
        return x

    def _residual(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """``y − S' x`` with ``S'`` converted to floats one row block at a time (its entries are exact)."""
        residual = np.array(y, dtype=float)
        for start, stop in row_blocks(self.basis.size):
            residual[start:stop] -= self.integer[start:stop] @ x
        return residual


@dataclass(frozen=True, eq=False)
class EigenCovariance(DenseCovariance):
    """``Σ_t = σ² c⁻² D⁻¹ G^{−1/2} D⁻¹`` (the unrounded design at the integer design's scale)."""

    design: EigenDesign
    noise_variance: float

    @property
    def size(self) -> int:  # type: ignore[override]
        return self.design.basis.size

    @cached_property
    def _inverse_root(self) -> ToeplitzMinusHankel:
        return self.design.basis.function(self.design.spectrum**-0.5)  # G^{−1/2}

    @cached_property
    def _inverse_scales(self) -> np.ndarray:
        return 1 / self.design.column_scales

    def row_block(self, start: int, stop: int) -> np.ndarray:
        inverse_scales = self._inverse_scales
        covariance = self._inverse_root.rows(start, stop)
        covariance *= inverse_scales[start:stop, None]
        covariance *= inverse_scales[None, :] * (self.noise_variance / self.design.scale**2)
        return covariance

    def matrix(self) -> np.ndarray:
        return self.row_block(0, self.size)


def _design_spectrum(layout: RangeLayout) -> tuple[SineBasis, np.ndarray] | None:
    """The sine basis and Gram eigenvalues of the workload's ranges (plus identity) on ``t``."""
    masses: dict[type, float] = {AllRange: 0.0, Prefix: 0.0, Identity: 0.0}
    for product in layout.workload.products:
        block = layout.ordered_block(product)
        if type(block) in masses:
            masses[type(block)] += product.weight**2 * layout.other_mass(product)
    # design for the kind with the larger Gram trace: n(n+1)(n+2)/6 (all ranges), n(n+1)/2 (prefixes)
    kind = AllRange if masses[AllRange] * (layout.size + 2) / 3 >= masses[Prefix] else Prefix
    if masses[kind] == 0:
        return None
    basis = SineBasis(kind, layout.size)
    return basis, masses[kind] * basis.eigenvalues + masses[Identity]


class EigenCandidate(RangeCandidate):
    """The integer-rounded eigen-design per cell of the other attributes, one zCDP group, exact GLS."""

    name = "eigen"

    def __init__(self, layout: RangeLayout, privacy: Privacy, sensitivity: Sensitivity, design: EigenDesign) -> None:
        super().__init__(layout, privacy)
        self.design = design
        magnitude = math.sqrt(design.max_column_norm2)
        while magnitude**2 < design.max_column_norm2:
            magnitude = math.nextafter(magnitude, math.inf)
        self.noise: GroupNoise = noise_for_group(privacy, privacy.rho, sensitivity, magnitude)

    @cached_property
    def covariance(self) -> EigenCovariance:
        return EigenCovariance(self.design, self.noise.variance)

    def group_budgets(self) -> tuple[GroupBudget, ...]:
        rows = self.layout.other_cells * self.layout.size
        return (GroupBudget(GROUP, rows, self.privacy.rho, self.noise.variance),)

    def measure(self, marginals: Mapping[tuple[str, ...], np.ndarray], rng: object = None, noise: bool = True) -> Measurement:
        leaves = self.layout.leaves(marginals)
        if int(np.abs(leaves).sum()) >= 2**62 // (2**SCALE_BITS + 1):
            raise ValueError("too many rows for the eigen strategy's exact integer arithmetic; use a hierarchy")
        values = leaves @ self.design.integer.T  # (other cells, n): S' applied per cell
        if noise:
            values = values + sample_noise(self.privacy, np.full(values.shape, self.noise.parameter), rng)
        return Measurement(self.name, {GROUP: values}, {GROUP: np.full(values.shape, self.noise.variance)}, self.privacy)

    def estimate(self, measurement: Measurement) -> np.ndarray:
        return self.design.solve(np.asarray(measurement.values[GROUP], dtype=float).T).T


def candidates(workload: Workload, privacy: Privacy, contributions: int = 1) -> list[Candidate]:
    """An eigen-design per ordered attribute carrying all-range or prefix queries (zCDP only)."""
    if privacy.is_laplace:
        return []
    found: list[Candidate] = []
    for layout in range_layouts(workload):
        spectrum = _design_spectrum(layout)
        if spectrum is None or layout.size > MAX_SIZE or layout.size**2 * layout.other_cells > MAX_MULTIPLY:
            continue
        found.append(EigenCandidate(layout, privacy, Sensitivity(contributions), EigenDesign(*spectrum)))
    return found
