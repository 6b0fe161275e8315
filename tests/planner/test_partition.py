"""Partition selection primitives (docs/math.md §6): closed forms, DP inequalities, sampling, audits."""

from __future__ import annotations

import decimal
import itertools
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

from planner import partition
from planner.noise import RandomSource
from planner.partition import (
    GaussianThresholding,
    LaplaceThresholding,
    OptimalSelection,
    PartitionSelection,
    PartitionSelectionImpossibleError,
    _DiscreteGaussian,
    choose,
    gaussian_threshold,
    laplace_threshold,
    optimal,
    optimal_keep_probabilities_by_recurrence,
    require_selection_possible,
)

EPSILONS = (0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0)
DELTAS = (1e-10, 1e-6, 1e-3, 0.1, 0.5, 0.9)
Z_99_99 = 3.89  # two-sided 99.99 % normal quantile, used for every binomial confidence bound


def binomial_half_width(probability: float, trials: int) -> float:
    """99.99 % normal-approximation half width, plus a 1/trials continuity margin."""
    return Z_99_99 * math.sqrt(probability * (1 - probability) / trials) + 1 / trials


# ---------------------------------------------------------------- optimal primitive: exact values


def grid_shortfall_bound(delta: float, n: np.ndarray) -> np.ndarray:
    """How far below the real optimum the 2^-62 grid may fall, relative to it: δ and every step
    rounded down (≤ 2·2^-62/δ), and e^ε bounded below within 2^-48 per step."""
    return 2.0**-61 / delta + (n + 1) * 2.0**-46


@pytest.mark.parametrize(("epsilon", "delta"), list(itertools.product(EPSILONS, DELTAS)))
def test_grid_follows_the_real_recurrence_from_below(epsilon: float, delta: float) -> None:
    """The sampled probabilities never exceed the real optimum (60-digit recurrence) and fall short of
    it by no more than the grid's resolution; π reaches 1 at the same n, or one unit later."""
    primitive = optimal(epsilon, delta)
    n = np.arange(int(primitive.always_kept()) + 6)
    reference = optimal_keep_probabilities_by_recurrence(epsilon, delta, int(n[-1]))
    grid = primitive.probability_of_keep(n)
    assert np.all(grid <= reference + 1e-15)
    assert np.all(reference - grid <= reference * grid_shortfall_bound(delta, n) + 1e-15)
    assert int(np.argmax(reference >= 1.0)) in (primitive.always_kept(), primitive.always_kept() - 1)


def exp_lower_bound(epsilon: float) -> Fraction:
    """A rational ≤ e^ε: 60 correctly rounded digits less 1e-50 relative, and at least 1 (ε above 700
    counts as 700, which only lowers it)."""
    with decimal.localcontext() as context:
        context.prec = 60
        return max(Fraction(1), Fraction(decimal.Decimal(min(epsilon, 700.0)).exp()) * (1 - Fraction(1, 10**50)))


def checked_counts(primitive: OptimalSelection) -> np.ndarray:
    """Every n up to where π reaches 1 (a window of the table's end and of the linear tail when it is long)."""
    last = int(primitive.always_kept())
    if last <= 5000:
        return np.arange(1, last + 3)
    table_end = partition.EXACT_STEPS
    return np.unique(np.concatenate([np.arange(1, 3000), np.arange(table_end - 50, table_end + 50), np.arange(last - 50, last + 3)]))


EXTREME_GRID = [
    (epsilon, delta, k)
    for epsilon in (0.0, 1e-9, 1e-3, 0.1, 1.0, 5.0, 20.0, 50.0, 700.0, 1e9)
    for delta in (1e-15, 1e-12, 1e-6, 0.1, 0.9)
    for k in (1, 3)
    if delta * k < 1
]


@pytest.mark.parametrize(("epsilon", "delta", "max_groups"), EXTREME_GRID)
def test_optimal_dp_inequalities_hold_exactly_for_the_sampled_probabilities(epsilon: float, delta: float, max_groups: int) -> None:
    """In doubles (the earlier code), π(n) near 1 broke the second inequality by up to 9,300 δ at ε = 20,
    δ = 1e-12. The grid values the sampler uses satisfy both, in exact rational arithmetic, at
    every (ε, δ) the primitive accepts: π(n) ≤ e^ε π(n−1) + δ and 1 − π(n−1) ≤ e^ε (1 − π(n)) + δ."""
    primitive = optimal(epsilon * max_groups, delta * max_groups, max_groups)
    n = checked_counts(primitive)
    keep = [Fraction(int(v), 1 << partition.KEEP_PROBABILITY_BITS) for v in primitive.keep_numerator(n)]
    before = [Fraction(int(v), 1 << partition.KEEP_PROBABILITY_BITS) for v in primitive.keep_numerator(n - 1)]
    growth, exact_delta = exp_lower_bound(primitive.partition_epsilon), Fraction(primitive.partition_delta)
    for count, now, previous in zip(n, keep, before):
        assert now <= growth * previous + exact_delta, count
        assert 1 - previous <= growth * (1 - now) + exact_delta, count
    assert keep[-1] == 1 and 0 < keep[0] <= exact_delta


def test_keep_compares_uniform_integers_with_the_exact_numerators() -> None:
    """What is sampled is exactly the grid probability: a key is kept when a uniform integer on
    [0, 2^62) is below π(n)·2^62 (the same seeded draws, compared by hand)."""
    primitive = optimal(20.0, 1e-12)
    counts = np.array([0, 1, 2, 3, 4, 5] * 1000)
    mask, _ = primitive.keep(counts, rng=np.random.default_rng(5))
    draws = RandomSource(np.random.default_rng(5)).integers(1 << partition.KEEP_PROBABILITY_BITS, size=counts.shape)
    np.testing.assert_array_equal(mask, draws < primitive.keep_numerator(counts))


@pytest.mark.parametrize("make", (optimal, laplace_threshold, gaussian_threshold, choose), ids=lambda f: f.__name__)
@pytest.mark.parametrize(("delta", "max_groups"), ((1e-320, 1), (5e-324, 1), (1e-16, 1), (2e-15, 3)))
def test_a_delta_below_the_grid_is_refused(make: Callable[..., PartitionSelection], delta: float, max_groups: int) -> None:
    with pytest.raises(ValueError, match="delta per partition"):
        make(1.0, delta, max_groups)


@pytest.mark.parametrize("delta", (1e-3, 0.1, 0.3, 0.9))
def test_epsilon_zero_is_linear_until_one(delta: float) -> None:
    """ε = 0: π(n) = min(n δ, 1), with δ rounded down to the grid (so 1 is reached at ⌈2^62 / ⌊δ 2^62⌋⌉)."""
    primitive = optimal(0.0, delta)
    n = np.arange(int(primitive.always_kept()) + 3)
    np.testing.assert_allclose(primitive.probability_of_keep(n), np.minimum(n * delta, 1.0), rtol=0, atol=1e-15)
    np.testing.assert_allclose(
        optimal_keep_probabilities_by_recurrence(0.0, delta, n[-1]), np.minimum(n * delta, 1.0), atol=1e-12
    )
    step = math.floor(Fraction(delta) * (1 << partition.KEEP_PROBABILITY_BITS))
    assert primitive.always_kept() == -(-(1 << partition.KEEP_PROBABILITY_BITS) // step)
    assert primitive.midpoint() == pytest.approx(0.5 / delta)


def test_tiny_epsilon_continues_linearly_after_the_table() -> None:
    """ε = 1e-6 per partition needs millions of units: the exact table stops at EXACT_STEPS and π then
    grows by δ per unit, up to 1 (still DP: checked exactly above for ε = 1e-9)."""
    primitive = optimal(1e-6, 1e-6)
    last = partition.EXACT_STEPS
    beyond = primitive.keep_numerator(np.array([last, last + 1, last + 1000]))
    step = math.floor(Fraction(1e-6) * (1 << partition.KEEP_PROBABILITY_BITS))
    assert beyond[1] - beyond[0] == step and beyond[2] - beyond[0] == 1000 * step
    assert primitive.probability_of_keep(int(primitive.always_kept())) == 1.0
    assert primitive.probability_of_keep(int(primitive.always_kept()) - 1) < 1.0


def test_delta_zero_keeps_nothing_and_is_reported_as_impossible() -> None:
    primitive = optimal(1.0, 0.0)
    np.testing.assert_array_equal(primitive.probability_of_keep(np.arange(1000)), np.zeros(1000))
    assert primitive.midpoint() == math.inf and primitive.always_kept() == math.inf
    with pytest.raises(PartitionSelectionImpossibleError, match=r"delta > 0.*domain"):
        require_selection_possible(0.0)
    for make in (choose, laplace_threshold, gaussian_threshold):
        with pytest.raises(PartitionSelectionImpossibleError, match="delta > 0"):
            make(1.0, 0.0)
    assert issubclass(PartitionSelectionImpossibleError, ValueError)
    require_selection_possible(1e-9)  # does not raise


def test_reference_midpoints() -> None:
    """Midpoints measured from another library's optimal implementation, and the
    continuous Laplace threshold τ = 1 + ln(1/(2δ))/ε that our discrete version must match."""
    for epsilon, delta, reference in ((1.0, 1e-5, 11.4), (0.1, 1e-5, 85.7), (5.0, 1e-8, 4.5)):
        assert round(optimal(epsilon, delta).midpoint(), 1) == reference
        continuous_laplace = 1 + math.log(1 / (2 * delta)) / epsilon
        assert laplace_threshold(epsilon, delta).midpoint() == pytest.approx(continuous_laplace, abs=0.1)


def test_optimal_midpoint_by_hand() -> None:
    """ε = 1, δ = 1e-5: π(11) = δ(e^11 − 1)/(e − 1) (first phase), π(12) = 1 − e^{−1}(1 − δ − π(11))."""
    epsilon, delta = 1.0, 1e-5
    at_11 = delta * math.expm1(11) / math.expm1(1)
    at_12 = 1 - math.exp(-1) * (1 - delta - at_11)
    primitive = optimal(epsilon, delta)
    assert primitive.probability_of_keep(11) == pytest.approx(at_11, rel=1e-13)
    assert primitive.probability_of_keep(12) == pytest.approx(at_12, rel=1e-13)
    assert primitive.midpoint() == pytest.approx(11 + (0.5 - at_11) / (at_12 - at_11), rel=1e-13)
    assert primitive.n_reaching(1.0) == primitive.always_kept() == 23


def test_max_groups_splits_the_budget_for_optimal() -> None:
    split = optimal(2.0, 1e-4, max_groups=4)
    single = optimal(0.5, 2.5e-5)
    n = np.arange(200)
    np.testing.assert_array_equal(split.probability_of_keep(n), single.probability_of_keep(n))
    assert split.midpoint() == single.midpoint()


# ---------------------------------------------------------------- DP inequalities, every primitive


def per_partition_guarantee(primitive: PartitionSelection) -> tuple[float, float]:
    """The (ε, δ) that each partition's keep decision satisfies on its own."""
    k = primitive.max_groups
    if isinstance(primitive, OptimalSelection):
        return primitive.epsilon / k, primitive.delta / k
    if isinstance(primitive, LaplaceThresholding):
        return primitive.epsilon / k, float(primitive.probability_of_keep(1))
    return primitive.epsilon, primitive.delta  # Gaussian: δ_noise(1) + tail <= δ


PRIMITIVES = [
    make(epsilon, delta, k)
    for make in (optimal, laplace_threshold, gaussian_threshold)
    for epsilon, delta in ((0.1, 1e-5), (1.0, 1e-5), (1.0, 1e-8), (5.0, 1e-8), (0.5, 0.05))
    for k in (1, 3)
] + [optimal(0.0, 0.01), optimal(2.0, 0.6)]


@pytest.mark.parametrize("primitive", PRIMITIVES, ids=lambda p: f"{p.name}-{p.epsilon}-{p.delta}-{p.max_groups}")
def test_dp_inequalities_hold_for_every_n(primitive: PartitionSelection) -> None:
    epsilon, delta = per_partition_guarantee(primitive)
    limit = int(min(primitive.always_kept(), 10**6)) if math.isfinite(primitive.always_kept()) else None
    n = np.arange((limit if limit is not None else primitive._search_limit()) + 10)
    keep = np.asarray(primitive.probability_of_keep(n))
    assert keep[0] == 0.0 and np.all(np.diff(keep) >= -1e-15) and np.all(keep <= 1)
    growth = math.exp(epsilon)
    tolerance = 1e-12
    assert np.all(keep[1:] <= growth * keep[:-1] + delta + tolerance)
    assert np.all(1 - keep[:-1] <= growth * (1 - keep[1:]) + delta + tolerance)


@pytest.mark.parametrize(("epsilon", "delta"), ((0.3, 1e-6), (1.0, 1e-5), (4.0, 1e-9)))
def test_optimal_is_tight_where_it_should_be(epsilon: float, delta: float) -> None:
    """Optimality: at every n below always_kept one of the two inequalities is an equality."""
    primitive = optimal(epsilon, delta)
    n = np.arange(1, int(primitive.always_kept()))
    keep, before = primitive.probability_of_keep(n), primitive.probability_of_keep(n - 1)
    slack = np.minimum(
        math.exp(epsilon) * before + delta - keep, math.exp(epsilon) * (1 - keep) + delta - (1 - before)
    )
    np.testing.assert_allclose(slack, 0, atol=1e-12)


@pytest.mark.parametrize(("epsilon", "delta", "k"), ((1.0, 1e-5, 1), (0.5, 1e-6, 1), (1.0, 1e-5, 3)))
def test_thresholds_spend_exactly_their_delta_share(epsilon: float, delta: float, k: int) -> None:
    laplace = laplace_threshold(epsilon, delta, k)
    assert 1 - (1 - laplace.probability_of_keep(1)) ** k == pytest.approx(delta, rel=1e-9)
    gaussian = gaussian_threshold(epsilon, delta, k)
    noise_share, tail_share = gaussian.noise_delta, gaussian.new_key_delta
    if k == 1:  # one partition changes: the noise and the appearance of a key never add up
        assert noise_share == tail_share == delta
    else:
        assert noise_share + tail_share == pytest.approx(delta, rel=1e-12) and 0 < noise_share < delta
    assert 1 - (1 - gaussian.probability_of_keep(1)) ** k == pytest.approx(tail_share, rel=1e-9)
    noise_delta = gaussian._rule.noise.privacy_delta(epsilon, k)  # at σ² rounded up for the exact sampler
    assert noise_delta <= noise_share and noise_delta == pytest.approx(noise_share, rel=1e-4)


def hockey_stick(first: np.ndarray, second: np.ndarray, epsilon: float) -> float:
    return float(np.maximum(first - math.exp(epsilon) * second, 0).sum())


@pytest.mark.parametrize(("sigma", "epsilon"), ((0.8, 1.0), (3.7, 1.0), (12.3, 0.2), (3.5, 3.0)))  # last: δ ≈ 1e-14
def test_discrete_gaussian_delta_equals_brute_force_hockey_stick(sigma: float, epsilon: float) -> None:
    noise = _DiscreteGaussian(sigma**2)
    bound = noise.support_bound
    values = np.arange(-bound - 2, bound + 3)
    centred, shifted = noise.pmf(values), noise.pmf(values - 1)
    assert noise.privacy_delta(epsilon, 1) == pytest.approx(hockey_stick(centred, shifted, epsilon), rel=1e-9)
    # two coordinates, each shifted by 1 (L2 sensitivity √2): product distributions
    joint, joint_shifted = np.outer(centred, centred), np.outer(shifted, shifted)
    assert noise.privacy_delta(epsilon, 2) == pytest.approx(hockey_stick(joint, joint_shifted, epsilon), rel=1e-7)


def test_gaussian_sigma_matches_the_analytic_gaussian() -> None:
    """The smallest σ for (1, 1e-5) is within 1 % of Balle & Wang's continuous 3.73 (and the
    single-group noise spends all of δ: no split is needed for k = 1)."""
    gaussian = gaussian_threshold(1.0, 1e-5)
    assert gaussian.noise_delta_fraction == 1.0
    assert gaussian.noise_scale == pytest.approx(3.73, rel=0.01)


def release_distribution(primitive: PartitionSelection, n: int) -> np.ndarray:
    """Exact law of one partition's output under a thresholding primitive: index 0 is "absent",
    index 1 + i is "released with noisy count low + i" (the noisy count is part of the release)."""
    noise = primitive._rule.noise
    low = -noise.support_bound - 2
    values = np.arange(low, primitive._search_limit() + noise.support_bound + 3)
    kept_weight = np.where(values >= primitive.threshold, 1.0, 0.0)
    kept_weight[values == primitive.threshold - 1] = primitive.tie_probability
    released = noise.pmf(values - n) * kept_weight if n > 0 else np.zeros(values.size)
    return np.concatenate([[1 - released.sum()], released])


@pytest.mark.parametrize(
    "primitive",
    [laplace_threshold(1.0, 1e-3), gaussian_threshold(1.0, 1e-3), laplace_threshold(1.0, 1e-3, 2), gaussian_threshold(1.0, 1e-3, 2)],
    ids=lambda p: f"{p.name}-{p.max_groups}",
)
def test_thresholding_releases_with_noisy_counts_are_dp_exactly(primitive: PartitionSelection) -> None:
    """Hockey-stick divergence between the exact output laws (keys present and their noisy counts)
    of neighbouring datasets, both directions, for every way one unit can change k = 1 or 2 keys."""
    epsilon, delta, k = primitive.epsilon, primitive.delta, primitive.max_groups
    for n in (1, 2, primitive.threshold - 1, primitive.threshold + 3):
        before_after = [(release_distribution(primitive, n), release_distribution(primitive, n + 1)),
                        (release_distribution(primitive, 0), release_distribution(primitive, 1))]
        if k == 1:
            cases = before_after
        else:  # the unit touches two keys: both existing, one new, or both new
            (old, old_plus), (empty, new) = before_after
            cases = [(np.outer(old, old), np.outer(old_plus, old_plus)), (np.outer(old, empty), np.outer(old_plus, new)),
                     (np.outer(empty, empty), np.outer(new, new))]
        for without_unit, with_unit in cases:
            assert hockey_stick(with_unit, without_unit, epsilon) <= delta * (1 + 1e-9)
            assert hockey_stick(without_unit, with_unit, epsilon) <= delta * (1 + 1e-9)
    # the bound is used, not wasted: the new-key case spends (close to) the whole δ for k = 1
    if k == 1:
        empty, new = release_distribution(primitive, 0), release_distribution(primitive, 1)
        assert hockey_stick(new, empty, epsilon) == pytest.approx(delta, rel=1e-9)


# ---------------------------------------------------------------- sampling


@pytest.mark.parametrize(
    "primitive",
    [optimal(1.0, 1e-5), laplace_threshold(1.0, 1e-5), gaussian_threshold(1.0, 1e-5), optimal(0.5, 1e-3, 2)],
    ids=lambda p: f"{p.name}-{p.max_groups}",
)
def test_empirical_keep_frequency_matches_probability(primitive: PartitionSelection) -> None:
    rng = np.random.default_rng(20261122)
    trials = 20_000
    middle = round(primitive.midpoint())
    for n in (1, middle - 3, middle, middle + 2, middle + 6):
        mask, _ = primitive.keep(np.full(trials, n), rng=rng)
        probability = float(primitive.probability_of_keep(n))
        assert abs(mask.mean() - probability) <= binomial_half_width(probability, trials), (n, mask.mean(), probability)


@pytest.mark.parametrize("primitive", [laplace_threshold(0.7, 1e-5), gaussian_threshold(0.7, 1e-5)], ids=lambda p: p.name)
def test_noisy_counts_are_integer_unbiased_with_the_stated_variance(primitive: PartitionSelection) -> None:
    trials, n = 100_000, 40
    mask, noisy = primitive.keep(np.full(trials, n), rng=np.random.default_rng(7))
    assert primitive.reuses_noisy_count and noisy.dtype.kind == "i"
    if isinstance(primitive, LaplaceThresholding):
        t = math.exp(-1 / primitive.noise_scale)
        variance = 2 * t / (1 - t) ** 2
    else:
        noise = primitive._rule.noise
        values = np.arange(-noise.support_bound, noise.support_bound + 1)
        variance = float((noise.pmf(values) * values**2).sum())
        assert variance <= primitive.noise_scale**2 * (1 + 1e-12)  # CKS 2020: variance <= σ²
    errors = noisy - n
    assert abs(errors.mean()) <= Z_99_99 * math.sqrt(variance / trials)
    kurtosis_bound = 6.5  # fourth moment / variance² is 3 (Gaussian) to 6 (Laplace)
    assert abs(errors.var() - variance) <= Z_99_99 * variance * math.sqrt((kurtosis_bound - 1) / trials)
    threshold = primitive.threshold
    np.testing.assert_array_equal(mask & (noisy < threshold - 1), False)
    np.testing.assert_array_equal(noisy[~mask] >= threshold, False)


def test_optimal_keeps_nothing_numeric() -> None:
    mask, noisy = optimal(1.0, 1e-5).keep(np.array([0, 1, 23, 500]), rng=np.random.default_rng(1))
    assert noisy is None and mask[0] == False and mask[2] == True and mask[3] == True  # noqa: E712


def test_default_sampling_uses_fresh_entropy() -> None:
    primitive = optimal(0.5, 0.2)  # π(1) = 0.2: two unseeded runs of 256 keys never agree by chance
    counts = np.ones(256, dtype=np.int64)
    first, _ = primitive.keep(counts)
    second, _ = primitive.keep(counts)
    assert not np.array_equal(first, second)


# ---------------------------------------------------------------- privacy audit


def audit_violation(
    keep: Callable[[np.ndarray, np.random.Generator], np.ndarray], n: int, epsilon: float, delta: float, trials: int
) -> float:
    """Largest excess of a DP inequality on the keep event between ``n`` and ``n + 1`` units,
    measured from sampled release frequencies, after subtracting both estimates' 99.99 %
    confidence half-widths (positive ⇒ a violation is detected with high confidence)."""
    rng = np.random.default_rng(99)
    low = float(keep(np.full(trials, n), rng).mean())
    high = float(keep(np.full(trials, n + 1), rng).mean())
    width_low, width_high = binomial_half_width(low, trials), binomial_half_width(high, trials)
    growth = math.exp(epsilon)
    released_more = (high - width_high) - (growth * (low + width_low) + delta)
    suppressed_more = (1 - low - width_low) - (growth * (1 - high + width_high) + delta)
    return max(released_more, suppressed_more)


AUDIT_CASES = [(optimal, 1.0, 0.02), (laplace_threshold, 1.0, 0.02), (gaussian_threshold, 1.0, 0.02)]


@pytest.mark.parametrize(("make", "epsilon", "delta"), AUDIT_CASES, ids=lambda x: getattr(x, "__name__", str(x)))
def test_privacy_audit_on_neighbouring_datasets(make: Callable[..., PartitionSelection], epsilon: float, delta: float) -> None:
    """A key with n units against the same key with one unit more (n = 0 is the key's appearance)."""
    primitive = make(epsilon, delta)
    for n in (0, 1, 2, 3):
        violation = audit_violation(lambda c, r: primitive.keep(c, r)[0], n, epsilon, delta, trials=40_000)
        assert violation <= 0, (n, violation)


def test_privacy_audit_detects_a_cheating_primitive() -> None:
    """The audit is not vacuous: doubling the optimal primitive's keep probability is caught."""
    primitive = optimal(1.0, 0.02)

    def cheating_keep(counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return rng.random(counts.shape) < np.minimum(2 * primitive.probability_of_keep(counts), 1)

    assert audit_violation(cheating_keep, 1, 1.0, 0.02, trials=40_000) > 0


# ---------------------------------------------------------------- choice and errors


def test_choose_picks_the_lower_midpoint_and_says_so() -> None:
    assert isinstance(choose(1.0, 1e-5), OptimalSelection)
    few = choose(1.0, 1e-5, max_groups=2)
    assert isinstance(few, OptimalSelection)
    assert few.midpoint() < gaussian_threshold(1.0, 1e-5, 2).midpoint()
    many = choose(1.0, 1e-5, max_groups=10)
    assert isinstance(many, GaussianThresholding)
    assert many.midpoint() < optimal(1.0, 1e-5, 10).midpoint()
    text = many.describe()
    assert "Gaussian thresholding" in text and f"{many.midpoint():.2f}" in text and "max_groups=10" in text
    assert "always kept from n = 23" in choose(1.0, 1e-5).describe()


@pytest.mark.parametrize("make", (optimal, laplace_threshold, gaussian_threshold, choose), ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("epsilon", "delta", "max_groups", "message"),
    (
        (-0.1, 1e-5, 1, "epsilon must be >= 0"),
        (math.nan, 1e-5, 1, "epsilon must be a finite number"),
        (1.0, -1e-5, 1, r"delta must lie in \[0, 1\)"),
        (1.0, 1.0, 1, r"delta must lie in \[0, 1\)"),
        (1.0, 1e-5, 0, "max_groups .* must be an integer >= 1"),
        (1.0, 1e-5, 1.5, "max_groups .* must be an integer >= 1"),
    ),
)
def test_bad_inputs_raise_clear_value_errors(
    make: Callable[..., PartitionSelection], epsilon: float, delta: float, max_groups: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make(epsilon, delta, max_groups)


def test_bad_counts_and_thresholding_without_epsilon() -> None:
    with pytest.raises(ValueError, match="non-negative integers"):
        optimal(1.0, 1e-5).probability_of_keep(-1)
    with pytest.raises(ValueError, match="non-negative integers"):
        laplace_threshold(1.0, 1e-5).probability_of_keep(np.array([1.5]))
    for make in (laplace_threshold, gaussian_threshold):
        with pytest.raises(ValueError, match="epsilon > 0"):
            make(0.0, 1e-5)
    with pytest.raises(ValueError, match="probability must lie"):
        optimal(1.0, 1e-5).n_reaching(1.5)
