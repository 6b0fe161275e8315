"""Tests of planner.noise: exact discrete Laplace / Gaussian samplers and the random source.

Distribution checks compare samples with the exact pmf at the parameter actually used. Seeded checks
use level ALPHA = 1e-4 (a correct sampler would fail one with probability 1e-4 on a fresh seed; with
the fixed seeds here they are deterministic). Checks on OS entropy are not reproducible, so they use
OS_ALPHA = 1e-6 and moment bounds of 6 standard errors instead of 5.
"""

from fractions import Fraction
import math

import numpy as np
import pytest
from scipy import stats

from planner import noise
from planner.noise import (
    MAX_GAUSSIAN_SIGMA2,
    MAX_LAPLACE_SCALE,
    MIN_GAUSSIAN_SIGMA2,
    MIN_LAPLACE_SCALE,
    NoiseParameterError,
    RandomSource,
    _bernoulli_exp,
    as_source,
    discrete_gaussian,
    discrete_gaussian_variance,
    discrete_laplace,
    discrete_laplace_variance,
    gaussian_sigma2_used,
    laplace_scale_used,
    secure_rng,
)

ALPHA = 1e-4
OS_ALPHA = 1e-6


# --- exact reference distributions -----------------------------------------------------------


def laplace_pmf(z: np.ndarray, scale: float) -> np.ndarray:
    decay = math.exp(-1.0 / scale)
    return (1 - decay) / (1 + decay) * decay ** np.abs(z)


def gaussian_pmf(z: np.ndarray, sigma2: float) -> np.ndarray:
    reach = int(60 * math.sqrt(sigma2)) + 60
    normaliser = np.exp(-np.arange(-reach, reach + 1.0) ** 2 / (2 * sigma2)).sum()
    return np.exp(-np.asarray(z, dtype=float) ** 2 / (2 * sigma2)) / normaliser


def reference(pmf, parameter: float) -> dict[str, float]:
    """Variance, fourth moment and support of a symmetric integer law, by direct summation."""
    reach = 1
    while pmf(np.array([reach]), parameter)[0] > 1e-300:
        reach *= 2
    z = np.arange(-reach, reach + 1.0)
    weights = pmf(z, parameter)
    return {"variance": float(np.sum(z**2 * weights)), "fourth": float(np.sum(z**4 * weights))}


def goodness_of_fit_pvalue(samples: np.ndarray, pmf, parameter: float) -> float:
    """Chi-square p-value of integer samples against a symmetric pmf; tails pooled into the edge bins."""
    n = samples.size
    edge = 0
    while n * pmf(np.array([edge + 1]), parameter)[0] >= 5:
        edge += 1
    interior = np.arange(-edge + 1, edge)
    interior_probability = pmf(interior, parameter)
    tail = (1 - interior_probability.sum()) / 2  # P[Z <= -edge] = P[Z >= edge]
    expected = n * np.concatenate(([tail], interior_probability, [tail]))
    observed = np.bincount(np.clip(samples, -edge, edge) + edge, minlength=2 * edge + 1)
    return float(stats.chisquare(observed, expected).pvalue)


def assert_distribution(samples: np.ndarray, pmf, parameter: float, alpha: float, sigmas: float) -> None:
    """Chi-square fit, mean, variance and a tail frequency, all against the exact law."""
    moments = reference(pmf, parameter)
    n, variance = samples.size, moments["variance"]
    assert samples.dtype == np.int64
    assert goodness_of_fit_pvalue(samples, pmf, parameter) >= alpha
    assert abs(samples.mean()) <= sigmas * math.sqrt(variance / n)
    assert abs(samples.var() - variance) <= sigmas * math.sqrt((moments["fourth"] - variance**2) / n)
    threshold = max(1, round(2.5 * math.sqrt(variance)))
    z = np.arange(threshold, threshold + 100 * int(math.sqrt(variance) + 10))
    tail_probability = 2 * float(pmf(z, parameter).sum())
    tail_count = int(np.count_nonzero(np.abs(samples) >= threshold))
    assert stats.binomtest(tail_count, n, tail_probability).pvalue >= alpha


# --- discrete Laplace ------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [0.5, 1.0, 3.7, 40.0])
def test_discrete_laplace_matches_exact_pmf(scale: float) -> None:
    samples = discrete_laplace(scale, 200_000, rng=11)
    assert_distribution(samples, laplace_pmf, laplace_scale_used(scale), ALPHA, sigmas=5)


def test_goodness_of_fit_detects_a_five_percent_scale_error() -> None:
    samples = discrete_laplace(3.7, 200_000, rng=12)
    assert goodness_of_fit_pvalue(samples, laplace_pmf, laplace_scale_used(3.7)) >= ALPHA
    assert goodness_of_fit_pvalue(samples, laplace_pmf, 3.7 * 1.05) < 1e-12


def test_discrete_laplace_with_one_scale_per_column() -> None:
    scales = np.array([0.5, 5.0, 50.0])
    samples = discrete_laplace(scales, (40_000, 3), rng=13)
    assert samples.shape == (40_000, 3) and samples.dtype == np.int64
    for column, scale in enumerate(scales):
        moments = reference(laplace_pmf, laplace_scale_used(scale))
        bound = 5 * math.sqrt((moments["fourth"] - moments["variance"] ** 2) / 40_000)
        assert abs(samples[:, column].var() - moments["variance"]) <= bound


def test_discrete_laplace_variance_is_exact() -> None:
    for scale in [0.05, 0.5, 1.0, 3.7, 40.0, 1000.0]:
        used = laplace_scale_used(scale)
        brute_force = reference(laplace_pmf, used)["variance"]
        assert discrete_laplace_variance(scale) == pytest.approx(brute_force, rel=1e-12)
        assert discrete_laplace_variance(scale) <= 2 * used**2
    assert discrete_laplace_variance(1.0) == pytest.approx(2 * math.e / (math.e - 1) ** 2, rel=1e-15)
    np.testing.assert_allclose(
        discrete_laplace_variance(np.array([1.0, 40.0])),
        [discrete_laplace_variance(1.0), discrete_laplace_variance(40.0)],
    )


# --- discrete Gaussian -----------------------------------------------------------------------


@pytest.mark.parametrize("sigma2", [0.8, 4.0, 100.0])
def test_discrete_gaussian_matches_exact_pmf(sigma2: float) -> None:
    samples = discrete_gaussian(sigma2, 100_000, rng=21)
    assert_distribution(samples, gaussian_pmf, gaussian_sigma2_used(sigma2), ALPHA, sigmas=5)


@pytest.mark.parametrize("sigma2", [2.0**28 + 0.3, 2.0**40 / 3, 2.0**44 + 12345, 2.0**59])
def test_discrete_gaussian_with_python_integer_arithmetic(sigma2: float) -> None:
    """Large σ² sends acceptance tests through Python ints (below 2^42) or through the reduced int64
    form with a power-of-two proposal scale (from 2^42); the law must not change."""
    n = 20_000
    samples = discrete_gaussian(sigma2, n, rng=22)
    used = gaussian_sigma2_used(sigma2)
    sigma = math.sqrt(used)
    assert abs(samples.mean()) <= 5 * sigma / math.sqrt(n)
    assert abs(samples.var() / used - 1) <= 5 * math.sqrt(2 / n)  # fourth moment 3σ⁴ at this σ
    within_one_sigma = int(np.count_nonzero(np.abs(samples) <= sigma))
    assert stats.binomtest(within_one_sigma, n, stats.norm.cdf(1) - stats.norm.cdf(-1)).pvalue >= ALPHA


@pytest.mark.parametrize("sigma2", [2.0**42, 2.0**42 * 1.3 + 7, 2.0**50 / 3, 2.0**59 + 2.0**40, 2.0**60])
def test_large_sigma2_proposal_scale_divides_it_and_the_acceptance_reduces_exactly(sigma2: float) -> None:
    p, q = (int(v[0]) for v in noise._round_up_dyadic(np.array([sigma2])))  # noqa: SLF001 (the sampler's own parameters)
    t = int(noise._proposal_scale(np.array([p]), np.array([q]))[0])  # noqa: SLF001
    sigma = math.sqrt(p / q)
    assert q == 1 and p % t == 0 and t & (t - 1) == 0 and sigma / 2 < t <= sigma
    rng = np.random.default_rng(41)
    for y in [0, 1, t, p // t, p // t + 1, *rng.integers(0, 40 * t, 20).tolist()]:
        general = Fraction((y * t * q - p) ** 2, 2 * p * q * t * t)
        assert Fraction((y - p // t) ** 2, 2 * p) == general


def test_proposal_scale_is_floor_sigma_plus_one_below_2_to_42_without_overflow() -> None:
    """Small σ² have denominators up to 2^40: comparing p with 2^42·q overflowed int64 and gave a zero
    scale; the rule must be ⌊σ⌋ + 1 for every σ² below 2^42 and a power of two within (σ/2, σ] above."""
    values = np.array([2.0**-9, 1e-3, 0.05, 0.3, 0.8, 4.0, 1e4, 2.0**41 * 1.9, 2.0**42, 2.0**50 / 3])
    p, q = noise._round_up_dyadic(values)  # noqa: SLF001
    t = noise._proposal_scale(p, q)  # noqa: SLF001
    sigma = np.sqrt(p / q)
    small = values < 2.0**42
    np.testing.assert_array_equal(t[small], np.floor(sigma[small]).astype(np.int64) + 1)
    assert np.all((t[~small] & (t[~small] - 1)) == 0) and np.all((sigma[~small] / 2 < t[~small]) & (t[~small] <= sigma[~small]))
    for value in (1e-3, 0.05, 0.3):  # they sample (a zero scale never returned) with the exact variance
        samples = discrete_gaussian(value, 20_000, rng=44)
        moments = reference(gaussian_pmf, gaussian_sigma2_used(value))
        assert abs(samples.var() - moments["variance"]) <= 5 * math.sqrt((moments["fourth"] - moments["variance"] ** 2) / 20_000)


def test_large_sigma2_acceptance_runs_in_int64(monkeypatch: pytest.MonkeyPatch) -> None:
    dtypes: list[object] = []
    original = noise._bernoulli_exp  # noqa: SLF001

    def recording(numerator: np.ndarray, denominator: np.ndarray, source: noise.RandomSource) -> np.ndarray:
        if numerator.size:
            dtypes.append(numerator.dtype)
        return original(numerator, denominator, source)

    monkeypatch.setattr(noise, "_bernoulli_exp", recording)
    discrete_gaussian(2.0**50, 5_000, rng=42)
    assert dtypes and all(d == np.int64 for d in dtypes)  # |Y| − σ²/t ≥ 2^31 would need |Y| ≳ 64σ


def test_discrete_gaussian_with_one_sigma2_per_entry() -> None:
    sigma2 = np.array([[0.8], [100.0]])
    samples = discrete_gaussian(sigma2, (2, 30_000), rng=23)
    for row, value in enumerate(sigma2[:, 0]):
        moments = reference(gaussian_pmf, gaussian_sigma2_used(value))
        bound = 5 * math.sqrt((moments["fourth"] - moments["variance"] ** 2) / 30_000)
        assert abs(samples[row].var() - moments["variance"]) <= bound


def test_discrete_gaussian_variance_is_exact() -> None:
    for sigma2 in [0.05, 0.3, 0.8, 1.0, 1.5, 4.0, 100.0, 2500.0]:
        brute_force = reference(gaussian_pmf, gaussian_sigma2_used(sigma2))["variance"]
        assert discrete_gaussian_variance(sigma2) == pytest.approx(brute_force, rel=1e-12)
        assert discrete_gaussian_variance(sigma2) <= gaussian_sigma2_used(sigma2)
    assert discrete_gaussian_variance(0.8) < 0.79999325  # visibly below σ² for small σ²
    assert discrete_gaussian_variance(2.0**50) == 2.0**50
    assert discrete_gaussian_variance(np.array([0.8, 4.0])).shape == (2,)


# --- parameters ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "used, minimum, maximum",
    [(laplace_scale_used, MIN_LAPLACE_SCALE, MAX_LAPLACE_SCALE), (gaussian_sigma2_used, MIN_GAUSSIAN_SIGMA2, MAX_GAUSSIAN_SIGMA2)],
)
def test_rounding_never_goes_below_the_request(used, minimum, maximum) -> None:
    requested = np.exp(np.random.default_rng(31).uniform(math.log(2.0**-45), math.log(maximum), 20_000))
    requested = np.concatenate((requested, [2.0**-20, 0.5, 1.0, 3.7, 1 / 3, maximum, np.nextafter(maximum, 0)]))
    rounded = used(requested)
    assert np.all(rounded >= requested)
    assert np.all(np.diff(rounded[np.argsort(requested)]) >= 0)
    raised = requested <= minimum
    assert raised.sum() > 1000 and np.all(rounded[raised] == minimum)
    assert np.all(rounded[~raised] <= requested[~raised] * (1 + 2.0**-20))
    for value in rounded[::97]:
        fraction = Fraction(float(value))
        assert fraction.denominator <= 2**40
        numerator = fraction.numerator
        assert numerator >> ((numerator & -numerator).bit_length() - 1) <= 2**21  # 21 significant bits


def test_rounding_of_known_values() -> None:
    assert laplace_scale_used(0.5) == 0.5
    assert laplace_scale_used(3.7) == math.ceil(3.7 * 2**19) / 2**19
    assert gaussian_sigma2_used(100.0) == 100.0
    assert gaussian_sigma2_used(1e-30) == MIN_GAUSSIAN_SIGMA2 == 2.0**-9
    assert laplace_scale_used(1e-30) == MIN_LAPLACE_SCALE == 2.0**-8
    assert laplace_scale_used(2.0**21 + 1) == 2.0**21 + 2  # integers above 2^21 keep 21 significant bits
    np.testing.assert_array_equal(laplace_scale_used([0.5, 100.0]), [0.5, 100.0])


def test_rounded_values_are_used_as_they_are() -> None:
    """Callers (thresholds, budgets) pass already-rounded values back in; they must not move again."""
    values = np.exp(np.random.default_rng(32).uniform(math.log(2.0**-45), math.log(MAX_LAPLACE_SCALE), 5_000))
    for used in (laplace_scale_used, gaussian_sigma2_used):
        np.testing.assert_array_equal(used(used(values)), used(values))


def test_extreme_parameters() -> None:
    n = 20_000
    assert not discrete_laplace(0.01, n, rng=33).any()  # P[Z != 0] ≈ 2e^-100
    assert not discrete_gaussian(1e-6, n, rng=33).any()  # σ² raised to 2^-9: P[Z != 0] ≈ 2e^-256
    assert not discrete_laplace(1e-6, n, rng=33).any()  # scale raised to 2^-8: P[Z != 0] ≈ 2e^-256
    for sampler, parameter, variance, kurtosis in [
        (discrete_laplace, MAX_LAPLACE_SCALE, 2 * MAX_LAPLACE_SCALE**2, 6.0),
        (discrete_gaussian, MAX_GAUSSIAN_SIGMA2, MAX_GAUSSIAN_SIGMA2, 3.0),
    ]:
        samples = sampler(parameter, n, rng=34).astype(np.float64)
        assert abs(samples.var() / variance - 1) <= 5 * math.sqrt((kurtosis - 1) / n)


def test_variances_at_tiny_scales_are_positive_with_finite_reciprocals() -> None:
    """A very large ε or ρ: the exact variance would underflow to 0 (and GLS divide by it); at the raised
    scale it is 2e^-256/(1 - e^-256)² for both families (the Gaussian's z = ±1 terms dominate alike)."""
    expected = 2 * math.exp(-256)
    for variance in (discrete_laplace_variance(1e-9), discrete_gaussian_variance(1e-12)):
        assert variance == pytest.approx(expected, rel=1e-12)
        assert math.isfinite(1 / variance**2)
    assert discrete_laplace_variance(MIN_LAPLACE_SCALE) == discrete_laplace_variance(MIN_LAPLACE_SCALE / 1000)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, 2.0**70, "big", [1.0, -2.0]])
def test_bad_parameters_raise_value_error(bad) -> None:
    for function in (discrete_laplace, discrete_gaussian):
        with pytest.raises(ValueError, match="must be (positive|a positive number)"):
            function(bad, 10, rng=1)
    for function in (laplace_scale_used, gaussian_sigma2_used, discrete_laplace_variance, discrete_gaussian_variance):
        with pytest.raises(NoiseParameterError):
            function(bad)


def test_shapes_and_broadcasting() -> None:
    assert discrete_laplace(2.0, rng=1).shape == ()
    assert discrete_laplace(2.0, 7, rng=1).shape == (7,)
    assert discrete_gaussian([1.0, 2.0], rng=1).shape == (2,)
    assert discrete_gaussian(np.full((2, 3), 4.0), (4, 2, 3), rng=1).shape == (4, 2, 3)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        discrete_laplace([1.0, 2.0, 3.0], (5, 2), rng=1)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        discrete_laplace([1.0, 2.0], 1, rng=1)


# --- random source ---------------------------------------------------------------------------


def test_as_source() -> None:
    assert as_source(None).uses_os_entropy and secure_rng().uses_os_entropy
    assert not as_source(3).uses_os_entropy
    source = RandomSource(np.random.default_rng(3))
    assert as_source(source) is source
    assert not as_source(np.random.default_rng(3)).uses_os_entropy
    np.testing.assert_array_equal(discrete_laplace(3.0, 50, rng=5), discrete_laplace(3.0, 50, rng=5))
    assert not np.array_equal(discrete_laplace(3.0, 50, rng=5), discrete_laplace(3.0, 50, rng=6))
    for bad in ("seed", 1.5, True):
        with pytest.raises(TypeError, match="rng must be"):
            as_source(bad)


def thirds_pvalue(values: np.ndarray, upper: int) -> float:
    """Chi-square p-value that values uniform on [0, upper) fall equally into three equal thirds."""
    if values.dtype == object:
        thirds = np.array([int(value) * 3 // upper for value in values])
    else:
        thirds = values // (upper // 3)
    return float(stats.chisquare(np.bincount(thirds.astype(np.int64), minlength=3)).pvalue)


def test_integers_small_bound_is_uniform() -> None:
    values = RandomSource(np.random.default_rng(41)).integers(3, size=300_000)
    assert values.dtype == np.int64 and set(np.unique(values)) == {0, 1, 2}
    assert stats.chisquare(np.bincount(values)).pvalue >= ALPHA


def test_integers_large_bound_has_no_modulo_bias() -> None:
    # Reducing a 64-bit word modulo 3·2^60 would put probability 2/6, 1/6, 1/6... into the thirds.
    upper = 3 * 2**60
    source = RandomSource(np.random.default_rng(42))
    values = source.integers(upper, size=60_000)
    assert values.min() >= 0 and values.max() < upper
    assert thirds_pvalue(values, upper) >= ALPHA
    assert stats.binomtest(int(np.count_nonzero(values % 2)), values.size).pvalue >= ALPHA
    top = source.integers(2**63 - 1, size=1000)
    assert top.min() >= 0 and top.max() >= 2**62  # reaches the top half of the range


def test_integers_with_one_bound_per_entry_and_python_ints() -> None:
    source = RandomSource(np.random.default_rng(43))
    values = source.integers(np.array([1, 2, 7, 2**40 + 3]), size=(50_000, 4))
    assert np.all(values[:, 0] == 0)
    assert stats.chisquare(np.bincount(values[:, 1])).pvalue >= ALPHA
    assert stats.chisquare(np.bincount(values[:, 2])).pvalue >= ALPHA
    assert thirds_pvalue(values[:, 3], 2**40 + 3) >= ALPHA
    huge = 3 * 2**100
    big = source.integers(np.array([huge], dtype=object), size=30_000)
    assert big.dtype == object and min(big) >= 0 and max(big) < huge
    assert thirds_pvalue(big, huge) >= ALPHA
    beyond_int64 = source.integers(np.uint64(3 * 2**62), size=30_000)  # numpy stores this bound as uint64
    assert beyond_int64.dtype == object and max(beyond_int64) < 3 * 2**62
    assert thirds_pvalue(beyond_int64, 3 * 2**62) >= ALPHA


def test_integers_reject_bad_bounds() -> None:
    source = RandomSource(np.random.default_rng(44))
    for bad in (0, -5, np.array([3, 0, 2, 2]), np.array([0], dtype=object)):
        with pytest.raises(ValueError, match="at least 1"):
            source.integers(bad, size=4)
    with pytest.raises(ValueError, match="must be integers"):
        source.integers(2.5, size=4)


def test_uniform_floats() -> None:
    values = RandomSource(np.random.default_rng(45)).uniform(100_000)
    assert values.min() >= 0 and values.max() < 1
    assert np.all(values * 2.0**53 == np.floor(values * 2.0**53))
    assert stats.kstest(values, "uniform").pvalue >= ALPHA


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(7)])
@pytest.mark.parametrize("dtype", [np.int64, object])
def test_bernoulli_exp_frequency(gamma: Fraction, dtype: type) -> None:
    """Bernoulli(exp(-γ)) in int64 and in Python ints (numbers beyond 2^64) has the exact rate."""
    n, scale = (100_000, 1) if dtype is np.int64 else (20_000, 10**25)
    numerator = np.full(n, gamma.numerator * scale, dtype=dtype)
    denominator = np.full(n, gamma.denominator * scale, dtype=dtype)
    outcomes = _bernoulli_exp(numerator, denominator, RandomSource(np.random.default_rng(46)))
    if gamma == 0:
        assert outcomes.all()
    else:
        assert stats.binomtest(int(outcomes.sum()), n, math.exp(-gamma)).pvalue >= ALPHA


@pytest.mark.parametrize("gamma", [Fraction(1, 3), Fraction(1)])
def test_bernoulli_exp_across_many_digit_blocks(monkeypatch: pytest.MonkeyPatch, gamma: Fraction) -> None:
    """With tiny digit blocks the Bernoulli(1/k) draws span many blocks; the rate must stay exp(-γ)."""
    monkeypatch.setattr(noise, "_DIGIT_BLOCK_LIMIT", 8)  # blocks {1,2,3}, {4}, {5}, …
    n = 100_000
    outcomes = _bernoulli_exp(
        np.full(n, gamma.numerator), np.full(n, gamma.denominator), RandomSource(np.random.default_rng(47))
    )
    assert stats.binomtest(int(outcomes.sum()), n, math.exp(-gamma)).pvalue >= ALPHA
    laplace = discrete_laplace(1.0, 100_000, rng=48)
    assert goodness_of_fit_pvalue(laplace, laplace_pmf, 1.0) >= ALPHA


# --- OS entropy (not reproducible: looser levels) --------------------------------------------


def test_os_entropy_discrete_laplace() -> None:
    samples = discrete_laplace(3.7, 200_000)
    assert_distribution(samples, laplace_pmf, laplace_scale_used(3.7), OS_ALPHA, sigmas=6)


def test_os_entropy_discrete_gaussian() -> None:
    samples = discrete_gaussian(4.0, 100_000)
    assert_distribution(samples, gaussian_pmf, gaussian_sigma2_used(4.0), OS_ALPHA, sigmas=6)


def test_os_entropy_integers_and_uniform() -> None:
    source = secure_rng()
    assert stats.chisquare(np.bincount(source.integers(3, size=300_000))).pvalue >= OS_ALPHA
    assert thirds_pvalue(source.integers(3 * 2**60, size=60_000), 3 * 2**60) >= OS_ALPHA
    assert stats.kstest(source.uniform(50_000), "uniform").pvalue >= OS_ALPHA


@pytest.mark.parametrize("bound", [1, 2, 3, 7, 8, 255, 256, 257, 2**32 - 1, 2**32 + 5, 2**52 + 3, 2**53])
def test_a_shared_bound_draws_exactly_what_per_entry_bounds_draw(bound: int) -> None:
    """The shared-bound fast path of RandomSource.integers takes the same words and rejects the same ones
    as the general per-entry path: seeded draws are identical, and all lie in [0, bound)."""
    shared = RandomSource(np.random.default_rng(bound % 1000)).integers(bound, size=500)
    per_entry = RandomSource(np.random.default_rng(bound % 1000)).integers(np.full(500, bound, dtype=np.uint64), size=500)
    np.testing.assert_array_equal(shared, per_entry)
    assert shared.min() >= 0 and int(shared.max()) < bound


# --- small batches: several candidates per pending sample in one round --------------------------


def small_batches(sampler, parameter: float, calls: int, size: int, seed: int) -> np.ndarray:
    """``calls`` sampler calls of ``size`` samples each from one seeded source, as a statement draws its
    noise (a few hundred cells or fewer: the rounds draw several candidates and trials per sample)."""
    source = RandomSource(np.random.default_rng(seed))
    return np.concatenate([sampler(parameter, size, rng=source) for _ in range(calls)])


@pytest.mark.parametrize("size", [10, 200])
def test_small_batches_have_the_exact_laplace_law(size: int) -> None:
    samples = small_batches(discrete_laplace, 2.0, 20_000 // size, size, seed=61)
    assert_distribution(samples, laplace_pmf, laplace_scale_used(2.0), ALPHA, sigmas=5)


def test_small_batches_have_the_exact_gaussian_law() -> None:
    samples = small_batches(discrete_gaussian, 6.0, 200, 100, seed=62)
    assert_distribution(samples, gaussian_pmf, gaussian_sigma2_used(6.0), ALPHA, sigmas=5)


def test_small_batches_of_bernoulli_exp_have_the_exact_rate() -> None:
    """γ = 5/3 (one Bernoulli(exp(-1)) trial and the fraction 2/3), 100 samples a call: the Bernoulli(γ)
    draws of a digit block are drawn at once for all its places."""
    source = RandomSource(np.random.default_rng(63))
    outcomes = np.concatenate([_bernoulli_exp(np.full(100, 5), np.full(100, 3), source) for _ in range(1_000)])
    assert stats.binomtest(int(outcomes.sum()), outcomes.size, math.exp(-5 / 3)).pvalue >= ALPHA


_FIRST_ACCEPTED = noise._first_accepted  # noqa: SLF001


def _smallest_accepted(result, pending, values, accepted, copies):  # noqa: ANN001, ANN202
    """Broken: keeps the accepted candidate of least magnitude instead of the first (biased towards 0)."""
    magnitude = np.where(accepted, np.abs(values), np.iinfo(np.int64).max).reshape(pending.size, copies)
    return _FIRST_ACCEPTED(result, pending, values, accepted & (np.abs(values) == magnitude.min(axis=1).repeat(copies)), copies)


def _first_candidate(result, pending, values, accepted, copies):  # noqa: ANN001, ANN202
    """Broken: keeps the first candidate whether or not it was accepted (no rejection at all)."""
    return _FIRST_ACCEPTED(result, pending, values, np.ones_like(accepted), copies)


@pytest.mark.parametrize("broken", [_smallest_accepted, _first_candidate])
def test_the_small_batch_check_catches_a_wrong_choice_of_candidate(monkeypatch: pytest.MonkeyPatch, broken) -> None:
    monkeypatch.setattr(noise, "_first_accepted", broken)
    samples = small_batches(discrete_laplace, 2.0, 500, 20, seed=61)
    assert goodness_of_fit_pvalue(samples, laplace_pmf, laplace_scale_used(2.0)) < 1e-12
