"""Exact discrete Laplace and discrete Gaussian noise, drawn from OS entropy by default.

Why integer noise: Mironov (2012, "On significance of the least significant bits for differential
privacy") showed that textbook floating-point Laplace noise leaks the true value through the set of
doubles it can produce. dpsql therefore adds only *integer* noise to integer-valued measurements, and
samples it *exactly*: every accept/reject decision compares uniformly random integers with integers,
never floats. The samplers follow Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential
Privacy" (NeurIPS 2020):

* Bernoulli(exp(-gamma)) for rational gamma by the alternating-series method (their Algorithm 1),
* the discrete Laplace, P[Z=z] ∝ exp(-|z|/b), for a rational scale b = t/s (their Algorithm 2),
* the discrete Gaussian, P[Z=z] ∝ exp(-z²/(2σ²)), by rejection from a discrete Laplace of scale
  ⌊σ⌋+1 (their Algorithm 3; for σ² ≥ 2^42 the largest power of two ≤ σ, which divides σ² and keeps the
  acceptance test in int64 — the law is exact for any scale).

And one two-dimensional law of dpsql's own, the *discrete ridge pair* for two rows of an ε-DP strategy:
P[(Y₁, Y₂) = y] ∝ exp(-φ_h(y)/b) with φ_h(y) = max(|y₁+y₂|, |y₁−y₂| − 2h) = min over |u| ≤ h of
|y₁−u| + |y₂+u|, the L1 distance from y to the segment {(u, −u): |u| ≤ h}. φ_h is 1-Lipschitz in the L1
norm (an infimum of such functions), so adding it to two rows whose values move by δ between neighbours
costs ‖δ‖₁/b of ε, exactly as two independent discrete Laplace samples of scale b do (h = 0 is that
pair). For h > 0 the mass spreads along the segment: Var(Y₁+Y₂) falls from 4b² towards 2b² (the least
any ε-DP noise on a sum of sensitivity 1 can have) while Var(Y₁−Y₂) grows; strategies whose GLS needs the
sum more than the difference gain (``planner.strategies.pidentity``). In the continuous limit the two
variances are b²(2 + 4/(2+w)) and b²(w³/3 + 2w² + 6w + 8)/(2+w), w = 2h/b; on small domains this law is
the optimum of the linear program over *all* ε-DP noise densities on two counts (checked numerically
for the two-cell range and prefix workloads, where every matrix mechanism is at least 4 % and 8 % worse).
Sampled exactly by rejection from two discrete Laplace samples y: φ_h(y) ≥ ‖y‖₁ − 2h, so y is kept with
probability exp(-(2h − ‖y‖₁ + φ_h(y))/b), a Bernoulli(exp(-γ)) with rational γ.

Rational parameters. A requested scale b or variance parameter σ² is replaced by the smallest number
``m·2^-k`` at or above it with ``m ≤ 2^21`` (21 significant bits) and ``k ≤ 40``, so its denominator is a
power of two at most 2^40. Rounding *up* only adds noise, so privacy is never weakened; the relative
increase is below 2^-20 (absolute below 2^-40 for values under 2^-20). Scales below
``MIN_LAPLACE_SCALE`` = 2^-8 and σ² below ``MIN_GAUSSIAN_SIGMA2`` = 2^-9 (a very large ε or ρ) are raised
to them: the noise is then 0 except with probability about 2e^-256 either way, and the exact variance,
about 2e^-256 ≈ 10^-111, stays a positive double whose reciprocal and square are finite (below that it
would underflow to 0, and GLS weights by its reciprocal). Raising, like rounding up, only adds noise.
`laplace_scale_used` and `gaussian_sigma2_used` return the value actually used (exactly representable
as a float), and `discrete_laplace_variance` / `discrete_gaussian_variance` report the variance at
that value.

Arithmetic. The samplers are vectorized: each step draws for a batch of pending candidates, masks
out the decided ones and loops until none is left. A statement's few hundred cells or fewer would pay
numpy's per-call overhead once per round, for as many rounds as the slowest sample needs, so small
batches draw several i.i.d. candidates (and geometric trials) per pending sample in one round and each
sample keeps its first accepted candidate (its first failed trial) — the same law as drawing them one
after another — and decide the places of a digit block elementwise, not one place per round.
Integers are numpy int64; where an intermediate could leave int64 (the discrete Gaussian's acceptance
test for 2^30 ≲ σ² < 2^42, or far-tail candidates) those entries run through the same code on Python
integers (numpy object arrays).

Randomness. `RandomSource` turns random bytes into unbiased bounded integers by masking and rejection
(no modulo bias). Bytes come from ``os.urandom`` (the kernel CSPRNG) unless a seed or a numpy
Generator is given, which is for tests only.

Example::

    >>> noise = discrete_laplace(2.0, size=5)              # OS entropy
    >>> noise = discrete_gaussian(9.0, size=(2, 3), rng=7)  # reproducible, for tests
"""

from __future__ import annotations

import math
import os
from typing import TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "MAX_GAUSSIAN_SIGMA2",
    "MAX_LAPLACE_SCALE",
    "MIN_GAUSSIAN_SIGMA2",
    "MIN_LAPLACE_SCALE",
    "NoiseParameterError",
    "RandomLike",
    "RandomSource",
    "as_source",
    "discrete_gaussian",
    "discrete_gaussian_variance",
    "discrete_laplace",
    "discrete_laplace_variance",
    "discrete_ridge_pairs",
    "discrete_ridge_variances",
    "gaussian_sigma2_used",
    "laplace_scale_used",
    "ridge_half_width",
    "secure_rng",
]

SIGNIFICANT_BITS = 21
"""A rounded parameter is m·2^-k with m ≤ 2^SIGNIFICANT_BITS."""
MAX_DENOMINATOR_EXPONENT = 40
"""A rounded parameter's denominator is at most 2^MAX_DENOMINATOR_EXPONENT."""
MAX_LAPLACE_SCALE = 2.0**40
MAX_GAUSSIAN_SIGMA2 = 2.0**60
LARGE_GAUSSIAN_SIGMA2 = 2**42
"""From this σ² on the rejection sampler's Laplace scale is a power of two dividing σ² (int64 arithmetic)."""
MIN_LAPLACE_SCALE = 2.0**-8
"""Smaller discrete Laplace scales are raised to it (their variance would underflow; see the module doc)."""
MIN_GAUSSIAN_SIGMA2 = 2.0**-9
"""Smaller discrete Gaussian σ² are raised to it (their variance would underflow; see the module doc)."""
MAX_RIDGE_WIDTH = 4.0
"""Largest ridge width 2h/b: the sampler keeps a proposal with probability about (1 + w/2)e^(-w) ≥ 5 %."""

IntArray: TypeAlias = NDArray[np.int64]
Size: TypeAlias = int | tuple[int, ...] | None
_WORD_TYPES = (np.uint8, np.uint16, np.uint32, np.uint64)
_WORD_LIMITS = tuple((word, int(np.iinfo(word).max)) for word in _WORD_TYPES)
_FLOAT_EXACT = 2**53  # integers up to here are exact in a float64
_INT64_MAX = 2**63 - 1
_DIGIT_BLOCK_LIMIT = 2**32  # digit blocks fit 32-bit words; the first, 12! ≈ 0.89·2^29, needs few rejections
_GAMMA_PLACES = 4  # places per block when Bernoulli(γ) draws are needed (one word per sample and place)
_SMALL_BATCH = 2048  # below this many pending samples, a round draws several candidates per sample ...
_MAX_COPIES = 8  # ... at most this many
_ONE = np.asarray(1, dtype=np.int64)


class NoiseParameterError(ValueError):
    """A noise scale, variance, bound or size that no sampler can use; the message says why."""


class RandomSource:
    """Uniform random integers and floats from OS entropy or, for tests, a numpy Generator.

    Both kinds of source only supply random words; the conversion to bounded integers (mask to a
    covering power of two, reject values at or above the bound, redraw those) is shared, so seeded
    tests exercise exactly the code that runs on OS entropy.
    """

    def __init__(self, generator: np.random.Generator | None = None) -> None:
        self._generator = generator

    @property
    def uses_os_entropy(self) -> bool:
        return self._generator is None

    def __repr__(self) -> str:
        return "RandomSource(os.urandom)" if self.uses_os_entropy else f"RandomSource({self._generator!r})"

    def integers(self, upper: ArrayLike, size: Size = None) -> NDArray:
        """Independent uniform integers on ``[0, upper)``, elementwise, without bias.

        ``upper`` is an integer or integer array (broadcast to ``size`` if given), every entry ≥ 1. Bounds
        up to 2^63 - 1 give int64; larger ones (Python ints, in an object array or not) give Python ints.
        """
        bounds = np.asarray(upper)
        shape = _output_shape(bounds.shape, size)
        if bounds.dtype != object and not np.issubdtype(bounds.dtype, np.integer):
            raise NoiseParameterError(f"upper bounds must be integers, got dtype {bounds.dtype}")
        if bounds.ndim == 0 and bounds.dtype != object and 1 <= int(bounds) <= _FLOAT_EXACT:
            return self._shared_bound(int(bounds), shape)
        if bounds.dtype == object or (bounds.size and int(bounds.max()) > _INT64_MAX):
            flat = [int(bound) for bound in np.broadcast_to(bounds, shape).ravel()]
            _check_bounds(min(flat, default=1))
            return np.array([self._below(bound) for bound in flat], dtype=object).reshape(shape)
        if bounds.size:
            _check_bounds(int(bounds.min()))
        # A shared bound stays 0-d; per-entry bounds are flattened.
        flat_bounds = (bounds if bounds.ndim == 0 else np.broadcast_to(bounds, shape).ravel()).astype(np.uint64)
        masks = _covering_masks(flat_bounds)
        word_type = _narrowest_word(int(masks.max(initial=0)))
        values = self._accepted(math.prod(shape), word_type, masks, flat_bounds)
        return values.view(np.int64).reshape(shape)  # every value is below 2^63

    def uniform(self, size: Size = None) -> NDArray[np.float64]:
        """Uniform floats on [0, 1) with 53 random bits each (for coin flips and shuffles, not noise)."""
        count = math.prod(_as_shape(size))
        words = self._words(count, np.uint64) >> np.uint64(11)
        return np.ldexp(words.astype(np.float64), -53).reshape(_as_shape(size))

    def _below(self, bound: int) -> int:
        """One uniform Python int on [0, bound), for bounds beyond int64."""
        bits = (bound - 1).bit_length()
        while True:
            raw = int.from_bytes(self._words((bits + 7) // 8, np.uint8).tobytes(), "little")
            candidate = raw & ((1 << bits) - 1)
            if candidate < bound:
                return candidate

    def _shared_bound(self, bound: int, shape: tuple[int, ...]) -> NDArray:
        """:meth:`integers` for one bound shared by every entry, in Python integers where numpy's
        per-call overhead would dominate (the samplers draw a few entries at a time). The mask is the one
        :func:`_covering_masks` gives (bound - 1 is exact in floating point here), and the words are
        drawn and replaced as there (:meth:`_accepted`), so seeded draws are the same."""
        mask = (1 << (bound - 1).bit_length()) - 1
        values = self._accepted(math.prod(shape), _narrowest_word(mask), np.uint64(mask), np.uint64(bound))
        return values.view(np.int64).reshape(shape)

    def _accepted(self, count: int, word_type: type[np.unsignedinteger], masks: NDArray, bounds: NDArray) -> NDArray[np.uint64]:
        """``count`` random words, each masked (``masks``: shared or one per entry) and below its bound: a
        word at or above it is replaced by the next unused word, in entry order, until none is left. A
        small batch draws some spare words with its first ones, so the replacements rarely need another
        call (each call costs numpy's and the kernel's overhead); every word is fresh and independent of
        what it replaces, so each entry is uniform below its bound whichever word it ends with."""
        spare = count // 4 + 4 if count <= _SMALL_BATCH else 0
        pool = self._words(count + spare, word_type).astype(np.uint64)
        values, used = pool[:count] & masks, count
        rejected = np.flatnonzero(values >= bounds)
        while rejected.size:
            if used + rejected.size > pool.size:
                pool, used = self._words(rejected.size, word_type).astype(np.uint64), 0
            redrawn = pool[used : used + rejected.size] & _take(masks, rejected)
            used += rejected.size
            accepted = redrawn < _take(bounds, rejected)
            values[rejected[accepted]] = redrawn[accepted]
            rejected = rejected[~accepted]
        return values

    def _words(self, count: int, word_type: type[np.unsignedinteger]) -> NDArray[np.unsignedinteger]:
        if self._generator is None:
            return np.frombuffer(os.urandom(count * np.dtype(word_type).itemsize), dtype=word_type)
        top = int(np.iinfo(word_type).max)
        return self._generator.integers(0, top, size=count, dtype=word_type, endpoint=True)


RandomLike: TypeAlias = RandomSource | np.random.Generator | int | None


def secure_rng() -> RandomSource:
    """A source backed by the operating system's CSPRNG; the default for everything released."""
    return RandomSource()


def as_source(rng: RandomLike = None) -> RandomSource:
    """None → OS entropy; an int → a seeded source (tests only); a Generator → wrapped; a source → itself."""
    if rng is None:
        return secure_rng()
    if isinstance(rng, RandomSource):
        return rng
    if isinstance(rng, np.random.Generator):
        return RandomSource(rng)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return RandomSource(np.random.default_rng(int(rng)))
    raise TypeError(
        f"rng must be None (OS entropy), an int seed, a numpy Generator or a RandomSource, not {type(rng).__name__}"
    )


def laplace_scale_used(scale: ArrayLike) -> float | NDArray[np.float64]:
    """The scale `discrete_laplace` really uses for ``scale``: rounded up to 21 significant bits, at
    least ``MIN_LAPLACE_SCALE``."""
    return _like(scale, _dyadic_value(_laplace_scales(scale)))


def gaussian_sigma2_used(sigma2: ArrayLike) -> float | NDArray[np.float64]:
    """The σ² `discrete_gaussian` really uses for ``sigma2``: rounded up to 21 significant bits, at
    least ``MIN_GAUSSIAN_SIGMA2``."""
    return _like(sigma2, _dyadic_value(_gaussian_sigma2s(sigma2)))


def discrete_laplace_variance(scale: ArrayLike, as_sampled: bool = True) -> float | NDArray[np.float64]:
    """Exact variance 2e^(-1/b)/(1-e^(-1/b))² of the discrete Laplace actually sampled (b rounded up), or
    with ``as_sampled=False`` at b itself (a lower bound: rounding up and raising only add variance)."""
    used = np.asarray(laplace_scale_used(scale) if as_sampled else _checked(scale, "discrete Laplace scale", MAX_LAPLACE_SCALE))
    decay = np.exp(-1.0 / used)
    return _like(scale, 2.0 * decay / np.expm1(-1.0 / used) ** 2)


def discrete_gaussian_variance(sigma2: ArrayLike, as_sampled: bool = True) -> float | NDArray[np.float64]:
    """Exact variance (≤ σ²) of the discrete Gaussian actually sampled (σ² rounded up), or with
    ``as_sampled=False`` at σ² itself (a lower bound: the variance grows with σ²).

    For σ² ≤ 1 the pmf is summed directly; above, the Poisson-summation dual of the same series,
    Var = σ² - 8π²σ⁴ Σ_{k≥1} k² e^(-2π²σ²k²) / (1 + 2 Σ_{k≥1} e^(-2π²σ²k²)),
    which converges in a few terms.
    Both sums run until their terms underflow.
    """
    used = np.asarray(gaussian_sigma2_used(sigma2) if as_sampled else _checked(sigma2, "discrete Gaussian sigma2", MAX_GAUSSIAN_SIGMA2))
    return _like(sigma2, np.vectorize(_gaussian_variance, otypes=[np.float64])(used))


def discrete_laplace(scale: ArrayLike, size: Size = None, rng: RandomLike = None) -> IntArray:
    """Integers with P[Z=z] ∝ exp(-|z|/b); ``scale`` b (scalar or array) is broadcast to ``size``.

    Adding this noise to an integer query of L1 sensitivity Δ with b = Δ/ε is ε-DP.
    """
    scales = _laplace_scales(scale)
    shape = _output_shape(scales.shape, size)
    numerator, denominator = (_per_entry(part, shape) for part in _round_up_dyadic(scales))
    return _discrete_laplace_rational(numerator, denominator, math.prod(shape), as_source(rng)).reshape(shape)


def discrete_gaussian(sigma2: ArrayLike, size: Size = None, rng: RandomLike = None) -> IntArray:
    """Integers with P[Z=z] ∝ exp(-z²/(2σ²)); ``sigma2`` (scalar or array) is broadcast to ``size``.

    Adding this noise to an integer query of L2 sensitivity Δ is Δ²/(2σ²)-zCDP.
    """
    variances = _gaussian_sigma2s(sigma2)
    shape = _output_shape(variances.shape, size)
    numerator, denominator = _round_up_dyadic(variances)
    p, q, t = (_per_entry(part, shape) for part in (numerator, denominator, _proposal_scale(numerator, denominator)))
    return _discrete_gaussian_rational(p, q, t, math.prod(shape), as_source(rng)).reshape(shape)


def discrete_ridge_pairs(scale: float, half_width: int, count: int, rng: RandomLike = None) -> IntArray:
    """``count`` independent discrete ridge pairs (shape ``(count, 2)``) of scale b and half-width h
    (module doc): P[y] ∝ exp(-max(|y₁+y₂|, |y₁−y₂| − 2h)/b). ε-DP like two discrete Laplace samples of
    scale b = Δ/ε on two rows of joint L1 sensitivity Δ; ``half_width`` 0 gives exactly that pair."""
    (numerator, denominator), h = _round_up_dyadic(_laplace_scales(scale)), _checked_half_width(scale, half_width)
    source = as_source(rng)
    pairs = np.empty((count, 2), dtype=np.int64)
    pending = np.arange(count)
    while pending.size:
        proposal = _discrete_laplace_rational(numerator, denominator, 2 * pending.size, source).reshape(-1, 2)
        total, difference = np.abs(proposal.sum(axis=1)), np.abs(proposal[:, 0] - proposal[:, 1])
        excess = 2 * h - np.maximum(total, difference) + np.maximum(total, difference - 2 * h)  # in [0, 2h]
        kept = _bernoulli_exp(excess * denominator, np.broadcast_to(numerator, excess.shape), source)
        pairs[pending[kept]] = proposal[kept]
        pending = pending[~kept]
    return pairs


def discrete_ridge_variances(scale: float, half_width: int) -> tuple[float, float]:
    """Exact ``(Var(Y₁+Y₂), Var(Y₁−Y₂))`` of `discrete_ridge_pairs` (b rounded up as it is there); the
    two are uncorrelated, so ``Var Y₁ = Var Y₂ = (s+d)/4`` and ``Cov(Y₁, Y₂) = (s−d)/4``.

    With a = y₁+y₂, d = y₁−y₂ (same parity) and q = e^(-1/b): where |d| ≤ |a| + 2h the weight is q^|a| and
    m = |a|+2h gives m+1 values of d with Σd² = m(m+1)(m+2)/3; elsewhere |d| = m+2h+2 (m ≥ 0, two signs)
    carries weight q^(m+2) and m+1 values of a with Σa² = m(m+1)(m+2)/3. Every sum is Σ_k P(k)q^k for a
    cubic P with non-negative coefficients (closed forms, no cancellation)."""
    b, h = float(laplace_scale_used(scale)), float(_checked_half_width(scale, half_width))
    q = math.exp(-1.0 / b)
    moments = _geometric_moments(q, -math.expm1(-1.0 / b))
    poly = np.polynomial.Polynomial

    def inner(p: np.polynomial.Polynomial) -> float:  # Σ_{a∈ℤ} p(|a|) q^|a|
        return 2.0 * _polynomial_series(p, moments) - p(0.0)

    def outer(p: np.polynomial.Polynomial) -> float:  # Σ_{m≥0} 2 p(m) q^(m+2)
        return 2.0 * q * q * _polynomial_series(p, moments)

    k, m = poly([0.0, 1.0]), poly([2.0 * h, 1.0])  # m = k + 2h in the first region
    cubic = poly([0.0, 1.0]) * poly([1.0, 1.0]) * poly([2.0, 1.0]) / 3.0  # m(m+1)(m+2)/3 in m
    mass = inner(m + 1.0) + outer(poly([1.0, 1.0]))
    sums = inner(k * k * (m + 1.0)) + outer(cubic)
    differences = inner(cubic(m)) + outer(poly([2.0 * h + 2.0, 1.0]) ** 2 * poly([1.0, 1.0]))
    return float(sums / mass), float(differences / mass)


def ridge_half_width(scale: float, width: float) -> int:
    """The integer half-width h nearest to ``width``·b/2 for the scale really used (w = 2h/b)."""
    b = float(laplace_scale_used(scale))
    return min(round(width * b / 2.0), math.floor(MAX_RIDGE_WIDTH * b / 2.0))


def _checked_half_width(scale: float, half_width: int) -> int:
    h = int(half_width)
    if h != half_width or not 0 <= h <= MAX_RIDGE_WIDTH * float(laplace_scale_used(scale)) / 2.0:
        raise NoiseParameterError(
            f"a ridge half-width must be an integer from 0 to {MAX_RIDGE_WIDTH:g}·scale/2, got {half_width!r}"
        )
    return h


def _geometric_moments(q: float, one_minus_q: float) -> tuple[float, float, float, float]:
    """Σ_{k≥0} k^j q^k for j = 0..3 (``one_minus_q`` passed in full precision for q near 1)."""
    r = one_minus_q
    return 1.0 / r, q / r**2, q * (1.0 + q) / r**3, q * (1.0 + 4.0 * q + q * q) / r**4


def _polynomial_series(p: np.polynomial.Polynomial, moments: tuple[float, ...]) -> float:
    """Σ_{k≥0} p(k) q^k for p of degree ≤ 3, from the moments Σ k^j q^k."""
    return float(sum(c * moment for c, moment in zip(p.coef, moments)))


# ---------------------------------------------------------------------------------------------
# Exact samplers (Canonne, Kamath & Steinke 2020). Array arguments are flat, one entry per sample;
# a 0-d parameter is shared by all samples.


def _bernoulli(numerator: NDArray, denominator: NDArray, count: int, source: RandomSource) -> NDArray[np.bool_]:
    """Bernoulli(numerator/denominator), elementwise: is a uniform integer below the numerator?"""
    return np.asarray(source.integers(denominator, size=count) < numerator, dtype=bool)


def _bernoulli_exp_at_most_one(
    numerator: NDArray, denominator: NDArray, count: int, source: RandomSource
) -> NDArray[np.bool_]:
    """Bernoulli(exp(-γ)) for γ = numerator/denominator ∈ [0, 1] (Algorithm 1, alternating series).

    Draw A_k ~ Bernoulli(γ/k) for k = 1, 2, … until one fails; exp(-γ) is the probability that the
    first failure has odd k. Each A_k is drawn as Bernoulli(1/k) ∧ Bernoulli(γ), so no product
    denominator·k is ever formed. The places k are decided a block at a time, elementwise over the whole
    block: the Bernoulli(1/k) parts come from one uniform integer R on [0, k0·(k0+1)···k1), whose digits
    in that mixed radix are independent and uniform, d_k ∈ [0, k), and d_k0 = … = d_k = 0 exactly when
    k0···k divides R; the Bernoulli(γ) parts (none when γ = 1) are one uniform integer per place — for a
    small batch drawn with the block for all its places (then at most ``_GAMMA_PLACES`` of them), for a
    large one only where every earlier A succeeded. Draws for places after a sample's first failure are
    never looked at, so the law is the sequential one.
    """
    outcome = np.empty(count, dtype=bool)
    active = np.arange(count)
    certain = numerator.ndim == 0 and numerator == denominator  # γ = 1: every Bernoulli(γ) succeeds
    k = 1
    while active.size:
        batched = not certain and active.size <= _SMALL_BATCH  # else Bernoulli(γ) only where still needed
        places = _digit_block(k, _GAMMA_PLACES if batched else None)
        digits = source.integers(math.prod(places), size=active.size)
        if batched:
            below = source.integers(_column(_take(denominator, active)), size=(active.size, len(places)))
            within = np.asarray(below < _column(_take(numerator, active)), dtype=bool)
        run = np.zeros(active.size, dtype=np.int64)  # A_k0, A_k0+1, … that succeed before the first failure
        alive = np.arange(active.size)  # the samples whose A's have all succeeded so far
        divisor = 1
        for column, place in enumerate(places):
            divisor *= place
            success = digits[alive] % divisor == 0
            if batched:
                success &= within[alive, column]
            elif not certain:
                rows = active[alive[success]]
                success[success] = _bernoulli(_take(numerator, rows), _take(denominator, rows), rows.size, source)
            alive = alive[success]
            if not alive.size:
                break
            run[alive] += 1
        failed = run < len(places)
        outcome[active[failed]] = (k + run[failed]) % 2 == 1  # the first failure is at place k + run
        active = active[~failed]
        k += len(places)
    return outcome


def _digit_block(first: int, most: int | None) -> list[int]:
    """The places first, first+1, … whose product stays below ``_DIGIT_BLOCK_LIMIT`` (always at least
    one), at most ``most`` of them."""
    places, radix = [first], first
    while radix * (places[-1] + 1) < _DIGIT_BLOCK_LIMIT and (most is None or len(places) < most):
        places.append(places[-1] + 1)
        radix *= places[-1]
    return places


def _column(parameter: NDArray) -> NDArray:
    """A per-sample parameter as a column (one row per sample); a shared one stays 0-d."""
    return parameter if parameter.ndim == 0 else parameter[:, None]


def _bernoulli_exp(numerator: NDArray, denominator: NDArray, source: RandomSource) -> NDArray[np.bool_]:
    """Bernoulli(exp(-γ)) for any γ = numerator/denominator ≥ 0 (flat arrays; Algorithm 1).

    exp(-γ) = exp(-1)^⌊γ⌋ · exp(-(γ - ⌊γ⌋)): ⌊γ⌋ independent Bernoulli(exp(-1)) trials and one more
    for the fractional part must all succeed. Trials stop at the first failure, so large γ costs little.
    """
    whole, fraction = numerator // denominator, numerator % denominator
    alive = np.asarray(_successes_of_exp_minus_one(numerator.size, source, at_most=whole) >= whole, dtype=bool)
    survivors = np.flatnonzero(alive)
    alive[survivors] = _bernoulli_exp_at_most_one(
        fraction[survivors], denominator[survivors], survivors.size, source
    )
    return alive


def _successes_of_exp_minus_one(count: int, source: RandomSource, at_most: NDArray | None = None) -> IntArray:
    """Number of Bernoulli(exp(-1)) successes before the first failure: geometric, P[V ≥ v] = e^(-v);
    with ``at_most`` (one integer per sample) counting stops there, min(V, at_most). A few trials per
    pending sample are drawn at once (:func:`_copies`); trials after a sample's first failure or its
    stop are drawn but never looked at."""
    successes = np.zeros(count, dtype=np.int64)
    active = np.arange(count) if at_most is None else np.flatnonzero(np.asarray(at_most > 0, dtype=bool))
    while active.size:
        width = _copies(active.size)
        trials = _bernoulli_exp_at_most_one(_ONE, _ONE, active.size * width, source).reshape(active.size, width)
        run = np.logical_and.accumulate(trials, axis=1).sum(axis=1)
        successes[active] += run
        active = active[run == width]
        if at_most is not None:
            active = active[np.asarray(successes[active] < at_most[active], dtype=bool)]
    return successes if at_most is None else np.minimum(successes, at_most)


def _copies(pending: int) -> int:
    """How many independent candidates (or trials) to draw per pending sample in one round: several
    while few samples are pending, where a round's cost is numpy's per-call overhead and the rounds
    needed until the last sample is decided would dominate; one for large batches."""
    return max(1, min(_MAX_COPIES, _SMALL_BATCH // max(pending, 1)))


def _first_accepted(
    result: IntArray, pending: IntArray, values: IntArray, accepted: NDArray[np.bool_], copies: int
) -> IntArray:
    """Rejection sampling with ``copies`` i.i.d. candidates per pending sample (candidate rows grouped by
    sample, in draw order): each sample takes its first accepted candidate, exactly what drawing the
    candidates one after another would give. Returns the samples still pending (none accepted)."""
    accepted, values = accepted.reshape(pending.size, copies), values.reshape(pending.size, copies)
    first = np.argmax(accepted, axis=1)
    rows = np.arange(pending.size)
    done = accepted[rows, first]
    result[pending[done]] = values[rows[done], first[done]]
    return pending[~done]


def _discrete_laplace_rational(t: IntArray, s: IntArray, count: int, source: RandomSource) -> IntArray:
    """``count`` discrete Laplace samples with scale t/s (Algorithm 2); t, s are 0-d or per sample.

    U ~ Uniform{0..t-1} kept with probability exp(-U/t), plus t·V with V geometric, is geometric with
    ratio e^(-1/t); ⌊(U + tV)/s⌋ is geometric with ratio e^(-s/t); a random sign, rejecting "-0", gives
    the two-sided law. Each round draws :func:`_copies` candidates per pending sample
    (:func:`_first_accepted`). With t ≤ 2^41, U + tV leaves int64 only if V ≥ 2^21, an event of
    probability e^(-2^21).
    """
    result = np.empty(count, dtype=np.int64)
    pending = np.arange(count)
    while pending.size:
        copies = _copies(pending.size)
        rows = np.repeat(pending, copies)
        scale_numerators = _take(t, rows)
        uniform = source.integers(scale_numerators, size=rows.size)
        kept = _bernoulli_exp_at_most_one(uniform, scale_numerators, rows.size, source)
        successes = np.zeros(rows.size, dtype=np.int64)
        successes[kept] = _successes_of_exp_minus_one(int(np.count_nonzero(kept)), source)
        magnitude = (uniform + scale_numerators * successes) // _take(s, rows)
        negative = source.integers(2, size=rows.size) == 1
        accepted = kept & ~(negative & (magnitude == 0))
        pending = _first_accepted(result, pending, np.where(negative, -magnitude, magnitude), accepted, copies)
    return result


def _proposal_scale(p: IntArray, q: IntArray) -> IntArray:
    """The discrete Laplace scale t of the rejection sampler for σ² = p/q: ⌊σ⌋ + 1, except for
    σ² ≥ ``LARGE_GAUSSIAN_SIGMA2`` the largest power of two ≤ σ, which divides p (σ² = m·2^e with
    m ≤ 2^21 has e ≥ 21 ≥ log₂σ − e/2 there), so the acceptance test reduces to int64 arithmetic (see
    :func:`_gaussian_acceptance`). Any t > 0 gives the exact law; t within a factor 2 of σ only costs
    a few more rejections."""
    floor_sigma = _integer_sqrt(p // q)
    _, exponent = np.frexp(floor_sigma.astype(np.float64))  # exact: ⌊σ⌋ < 2^31
    power = np.ldexp(1.0, exponent - 1).astype(np.int64)  # largest power of two ≤ ⌊σ⌋
    return np.where(p // q >= LARGE_GAUSSIAN_SIGMA2, power, floor_sigma + 1)  # p // q: no int64 overflow


def _discrete_gaussian_rational(p: IntArray, q: IntArray, t: IntArray, count: int, source: RandomSource) -> IntArray:
    """``count`` discrete Gaussian samples with σ² = p/q from discrete Laplace candidates of scale t.

    Algorithm 3: a candidate Y is accepted with probability exp(-(|Y| - σ²/t)²/(2σ²)), which in
    integers is exp(-(|Y|·t·q - p)² / (2·p·q·t²)). p, q, t are 0-d or per sample.
    """
    result = np.empty(count, dtype=np.int64)
    pending = np.arange(count)
    while pending.size:
        copies = _copies(pending.size)
        rows = np.repeat(pending, copies)
        scale_numerators = _take(t, rows)
        candidates = _discrete_laplace_rational(scale_numerators, _ONE, rows.size, source)
        accepted = _gaussian_acceptance(np.abs(candidates), _take(p, rows), _take(q, rows), scale_numerators, source)
        pending = _first_accepted(result, pending, candidates, accepted, copies)
    return result


def _gaussian_acceptance(
    magnitude: IntArray, p: IntArray, q: IntArray, t: IntArray, source: RandomSource
) -> NDArray[np.bool_]:
    """Bernoulli(exp(-γ)) with γ = (|Y|·t·q - p)² / (2·p·q·t²), or, where q = 1 and t divides p
    (c = p/t), the same γ reduced by t²: (|Y| - c)² / (2p)."""
    count = magnitude.size
    p, q, t = (np.broadcast_to(part, (count,)) for part in (p, q, t))
    reduced = (q == 1) & (p % t == 0)
    # Floats only choose the arithmetic: int64 is exact where the offset is below 2^31 (its square below
    # 2^62) and the denominator below 2^61 — margins far beyond float rounding; other entries use Python ints.
    t_q = t.astype(np.float64) * q
    small_general = (magnitude * t_q < 2.0**31) & (p < 2**31) & (2.0 * p * t_q * t < 2.0**61)
    small_reduced = np.abs(magnitude - (p // np.where(reduced, t, 1)).astype(np.float64)) < 2.0**31
    in_int64 = np.where(reduced, small_reduced, small_general)
    accepted = np.empty(count, dtype=bool)
    for rows, dtype in ((np.flatnonzero(in_int64), np.int64), (np.flatnonzero(~in_int64), object)):
        y, p_rows, q_rows, t_rows = (part[rows].astype(dtype) for part in (magnitude, p, q, t))
        short = reduced[rows]
        offset = np.where(short, y - p_rows // t_rows, y * t_rows * q_rows - p_rows)
        denominator = np.where(short, 2 * p_rows, 2 * p_rows * q_rows * t_rows * t_rows)
        accepted[rows] = _bernoulli_exp(offset * offset, denominator, source)
    return accepted


# ---------------------------------------------------------------------------------------------
# Parameters, shapes, variances.


def _checked(values: ArrayLike, name: str, maximum: float) -> NDArray[np.float64]:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise NoiseParameterError(f"{name} must be a positive number or array of them, got {values!r}") from error
    valid = (array > 0) & (array <= maximum)  # False for NaN
    if not valid.all():
        bad = array[~valid].flat[0]
        raise NoiseParameterError(
            f"{name} must be positive and at most {maximum:g}, got {bad!r}"
            " (a zero, negative or NaN value usually means ε, ρ or a sensitivity was not set)"
        )
    return array


def _laplace_scales(scale: ArrayLike) -> NDArray[np.float64]:
    return np.maximum(_checked(scale, "discrete Laplace scale", MAX_LAPLACE_SCALE), MIN_LAPLACE_SCALE)


def _gaussian_sigma2s(sigma2: ArrayLike) -> NDArray[np.float64]:
    return np.maximum(_checked(sigma2, "discrete Gaussian sigma2", MAX_GAUSSIAN_SIGMA2), MIN_GAUSSIAN_SIGMA2)


def _round_up_dyadic(values: NDArray[np.float64]) -> tuple[IntArray, IntArray]:
    """Reduced (numerator, denominator) of the smallest m·2^-k ≥ value with m ≤ 2^21, k ≤ 40.

    Exact: frexp, ldexp (scaling by a power of two) and ceil introduce no rounding error.
    """
    _, exponent = np.frexp(values)  # value = f·2^exponent with f in [0.5, 1)
    shift = np.minimum(SIGNIFICANT_BITS - exponent, MAX_DENOMINATOR_EXPONENT)
    mantissa = np.ceil(np.ldexp(values, shift))
    numerator = np.ldexp(mantissa, np.maximum(-shift, 0)).astype(np.int64)
    denominator = np.ldexp(1.0, np.maximum(shift, 0)).astype(np.int64)
    common = np.gcd(numerator, denominator)
    return numerator // common, denominator // common


def _dyadic_value(values: NDArray[np.float64]) -> NDArray[np.float64]:
    numerator, denominator = _round_up_dyadic(values)
    return numerator / denominator  # exact: a 21-bit numerator over a power of two


def _integer_sqrt(values: IntArray) -> IntArray:
    """⌊√n⌋ elementwise for 0 ≤ n < 2^62: a float estimate (off by at most one) corrected in integers."""
    root = np.floor(np.sqrt(values.astype(np.float64))).astype(np.int64)
    root -= root * root > values
    root += (root + 1) * (root + 1) <= values
    return root


def _gaussian_variance(sigma2: float) -> float:
    if sigma2 <= 1.0:
        z = np.arange(1.0, math.ceil(40.0 * math.sqrt(sigma2)) + 2.0)
        weights = np.exp(-z * z / (2.0 * sigma2))
        return float(2.0 * np.sum(z * z * weights) / (1.0 + 2.0 * np.sum(weights)))
    rate = 2.0 * math.pi**2 * sigma2
    k = np.arange(1.0, math.ceil(math.sqrt(800.0 / rate)) + 2.0)
    weights = np.exp(-rate * k * k)
    return float(sigma2 - 4.0 * rate * sigma2 * np.sum(k * k * weights) / (1.0 + 2.0 * np.sum(weights)))


def _check_bounds(smallest: int) -> None:
    if smallest < 1:
        raise NoiseParameterError(f"upper bounds must be at least 1 (the range is [0, upper)), got {smallest}")


def _covering_masks(bounds: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """A mask 2^j - 1 ≥ bound - 1, elementwise, with 2^j < 2·bound except as noted.

    j is the binary exponent of float(bound - 1). Rounding to float never crosses a power of two
    downwards, so the mask always covers bound - 1; within 2^-53 below a power of two it may be one bit
    wider than needed, which only costs a few more rejections.
    """
    _, exponent = np.frexp((bounds - np.uint64(1)).astype(np.float64))
    return (np.uint64(1) << np.minimum(exponent, 63).astype(np.uint64)) - np.uint64(1)


def _take(parameter: NDArray, rows: NDArray) -> NDArray:
    """The parameter of the given samples: a shared (0-d) parameter serves them all."""
    return parameter if parameter.ndim == 0 else parameter[rows]


def _per_entry(parameter: ArrayLike, shape: tuple[int, ...]) -> NDArray:
    """A shared parameter stays 0-d, and so does an array whose entries are all equal (the samplers'
    shared-parameter paths are cheaper and draw the same words); else one flat entry per sample."""
    parameter = np.asarray(parameter)
    if parameter.ndim == 0:
        return parameter
    if parameter.size and (parameter == parameter.flat[0]).all():
        return np.asarray(parameter.flat[0])
    return np.broadcast_to(parameter, shape).ravel()


def _narrowest_word(mask: int) -> type[np.unsignedinteger]:
    return next(word for word, largest in _WORD_LIMITS if mask <= largest)


def _as_shape(size: Size) -> tuple[int, ...]:
    if size is None:
        return ()
    return (size,) if isinstance(size, (int, np.integer)) else tuple(size)


def _output_shape(parameter_shape: tuple[int, ...], size: Size) -> tuple[int, ...]:
    if size is None:
        return parameter_shape
    shape = _as_shape(size)
    if shape == parameter_shape or (not parameter_shape and all(d >= 0 for d in shape)):
        return shape
    message = f"a parameter of shape {parameter_shape} cannot be broadcast to size {shape}"
    try:
        broadcast = np.broadcast_shapes(parameter_shape, shape)
    except ValueError as error:
        raise NoiseParameterError(message) from error
    if broadcast != shape:
        raise NoiseParameterError(message)
    return shape


def _like(template: ArrayLike, values: NDArray[np.float64]) -> float | NDArray[np.float64]:
    """A float for a scalar template, else the array."""
    return float(values) if np.ndim(template) == 0 else values
