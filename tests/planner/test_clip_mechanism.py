"""The private clips (``planner.clipping``): their candidates, exact laws, privacy on every neighbour of small
histograms, and where they land on light- and heavy-tailed data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner import Privacy, UpperClip
from planner import clipping


def test_candidates_form_a_geometric_grid_down_from_the_upper_bound() -> None:
    found = clipping.candidates(1 << 22)
    assert found[-1] == 1 << 22 and found[0] == 1 and list(found) == sorted(set(found))
    wide = [b / a for a, b in zip(found, found[1:]) if a > 1000]
    assert max(wide) <= 2 ** (1 / clipping.STEPS_PER_DOUBLING) * 1.001  # rounded to whole steps
    assert clipping.candidates(1000)[-3:] == (958, 979, 1000)  # 1000·2^(−j/32), rounded to the base grid


def _law(clip: UpperClip, histogram: np.ndarray, epsilon: float | None = None) -> np.ndarray:
    """The mechanism's exact law by its formula, computed row by row: ``S(c)`` the clipped rows each weighed by its
    excess up to ``1/REACH`` of the width (floored to 2^-16), ``P(c) ∝ width^(−K)·exp(−ε·S(c)/k)`` with the
    quantised ε and the rounded base measure (``epsilon``: the data term at another ε, the broken variant)."""
    bits = 2**clipping.EPSILON_BITS
    clips = np.array(clip.candidates)
    rows = np.repeat(np.arange(histogram.size), histogram)
    score = np.array([math.floor(bits * sum(min(clipping.REACH * (i - c) / c, 1.0) for i in rows if i > c) + 1e-9) / bits for c in clips])
    quantised = math.floor((clip.privacy.epsilon if epsilon is None else epsilon) * bits) / bits  # type: ignore[operator]
    prior = np.round(clip.power * np.log(clips / clips[0]) * bits) / bits
    log_weight = -quantised * score / clip.contributions - prior
    weight = np.exp(log_weight - log_weight.max())
    return weight / weight.sum()


def test_the_mechanism_draws_its_law() -> None:
    histogram = np.zeros(41, dtype=np.int64)
    histogram[[3, 10, 20, 21, 25, 33, 40]] = [5, 3, 4, 2, 1, 1, 1]
    clip = UpperClip(40, Privacy.laplace(1.0), slope=0.1)
    draws = np.array([clip.release(histogram, rng=seed) for seed in range(3000)])
    expected = _law(clip, histogram)
    frequency = np.array([np.mean(draws == c) for c in clip.candidates])
    assert np.all(np.abs(frequency - expected) <= 4 * np.sqrt(expected * (1 - expected) / draws.size) + 2e-3)


def test_the_excess_score_weighs_each_clipped_row_by_its_excess_and_only_ever_rises() -> None:
    """``S(c)`` by hand at c = 40 (REACH 20: a row 2 or more above counts 1), and on random histograms adding a
    row lowers no score and raises each by at most one (2^16 in the fixed point): the monotone score the
    mechanism's missing factor 2 needs."""
    clip = UpperClip(100, Privacy.laplace(1.0), slope=1.0)
    histogram = np.zeros(101, dtype=np.int64)
    histogram[[41, 45, 100]] = [3, 1, 2]
    scores = dict(zip(clip.candidates, clip.excess_scores(histogram)))
    assert scores[40] == math.floor(2**16 * (3 * 20 / 40 + 1 + 2))
    rng = np.random.default_rng(3)
    for _ in range(50):
        histogram = np.bincount(rng.integers(0, 101, size=rng.integers(0, 30)), minlength=101)
        before = clip.excess_scores(histogram)
        for point in rng.integers(0, 101, size=5):
            after = clip.excess_scores(histogram + np.eye(101, dtype=np.int64)[point])
            assert np.all(after >= before) and np.all(after - before <= 2**16)


def test_the_clip_is_epsilon_dp_on_every_neighbour_and_not_at_twice_its_epsilon() -> None:
    """Histograms of up to 3 rows over grid points in every part of the score (below a candidate, within a twentieth
    of its width above it, beyond), a row added anywhere: no clip's probability moves by more than e^ε (k = 1),
    and the bound is nearly met; the same law with its data term at 2ε (the factor the monotone score saves,
    spent twice) moves some by more."""
    clip = UpperClip(64, Privacy.laplace(1.0), slope=0.05)
    points = np.array([0, 1, 20, 21, 22, 40, 41, 42, 43, 63, 64])
    rng = np.random.default_rng(0)
    worst, broken = 0.0, 0.0
    for _ in range(40):
        histogram = np.bincount(rng.choice(points, size=rng.integers(0, 4)), minlength=65)
        law, doubled = _law(clip, histogram), _law(clip, histogram, epsilon=2.0)
        np.testing.assert_allclose(law, _implemented(clip, histogram), rtol=1e-9, atol=1e-15)
        for point in points:
            neighbour = histogram.copy()
            neighbour[point] += 1
            worst = max(worst, float(np.max(np.abs(np.log(law / _law(clip, neighbour))))))
            broken = max(broken, float(np.max(np.abs(np.log(doubled / _law(clip, neighbour, epsilon=2.0))))))
    assert 0.9 < worst <= 1.0 + 1e-6 and broken > 1.5


def _implemented(clip: UpperClip, histogram: np.ndarray) -> np.ndarray:
    numerators, denominator = clip._numerators(histogram)
    weight = np.exp(-(numerators - numerators.min()) / denominator)
    return weight / weight.sum()


def test_a_top_coded_column_is_clipped_at_or_just_above_its_top_value() -> None:
    """Light tail: 2,000 rows over 0..98 with 137 at 98, bounds [0, 1000] (one step per integer), ε = 0.1 and the
    noise of nine groups' sums (λ = 11 rows): the clip lies below 98 with probability under 2 % and within
    12 % above it with probability over 80 %."""
    histogram = np.zeros(1001, dtype=np.int64)
    histogram[:98] = 19
    histogram[98] = 137
    law = _implemented(UpperClip(1000, Privacy.laplace(0.1), slope=11.0), histogram)
    clips = np.array(clipping.candidates(1000))
    assert law[clips < 98].sum() < 0.02 and law[(clips >= 98) & (clips <= 110)].sum() > 0.8


def test_more_noise_pulls_the_clip_lower() -> None:
    """The predicted error's trade-off: a heavy tail (log-normal, 5,000 rows, bounds [0, 10^7]) is clipped lower
    in law when the measurement's noise per unit of clip (λ) is larger."""
    values = np.random.default_rng(4).lognormal(10, 1.0, 5000)
    histogram = np.bincount(np.minimum(np.round(values / 10_000_000 * 4096), 4096).astype(np.int64), minlength=4097)
    clips = np.array(clipping.candidates(4096)) * 10_000_000 / 4096
    medians = [clips[np.searchsorted(np.cumsum(_implemented(UpperClip(4096, Privacy.laplace(0.1), slope=s), histogram)), 0.5)] for s in (1.0, 4.0, 16.0)]
    assert medians[0] > medians[1] > medians[2] and values.max() > medians[0]


def test_the_zcdp_clip_runs_at_the_square_root_of_eight_rho() -> None:
    clip = UpperClip(1000, Privacy.zcdp(0.125 * 0.15**2), slope=2.0)
    assert clip._epsilon() == pytest.approx(0.15) and clip.power == pytest.approx(0.15 * 2.0 * clipping.REACH)
    assert "rho" in clip.describe()


@pytest.mark.parametrize("slope", [0.0, -1.0, float("nan"), float("inf")])
def test_the_noise_slope_is_a_positive_number(slope: float) -> None:
    with pytest.raises(ValueError, match="noise slope"):
        UpperClip(64, Privacy.laplace(1.0), slope=slope)


@pytest.mark.parametrize(("privacy", "contributions", "rows"), [
    (Privacy.laplace(0.5), 1, 3 + 1 / 0.5),  # m + k/ε: one temperature of the mechanism above m
    (Privacy.laplace(0.25), 2, 3 + 2 / 0.25),
    (Privacy.zcdp(0.125), 1, 3 + 1 / 1.0),  # ε = √(8ρ) = 1
])
def test_the_error_bars_assume_one_temperature_of_rows_above_the_least(privacy: Privacy, contributions: int, rows: float) -> None:
    clip = UpperClip(64, privacy, slope=1.0, contributions=contributions)
    assert clip.rows_above == pytest.approx(rows) and clip.relative_excess == 0.5


def _magnitude_law(clip: clipping.MagnitudeClip, histogram: np.ndarray) -> np.ndarray:
    numerators, denominator = clip._numerators(histogram)
    weight = np.exp(-(numerators - numerators.min()) / denominator)
    return weight / weight.sum()


def test_the_magnitude_clip_is_epsilon_dp_on_every_neighbour_and_not_at_twice_its_epsilon() -> None:
    """``bounds: auto``'s clip: histograms of up to 3 rows over bins around the first candidate and beyond the last,
    a row added anywhere: no clip's probability moves by more than e^ε; the same law at 2ε (a halved
    sensitivity) moves some by more."""
    clip, broken = clipping.MagnitudeClip(Privacy.laplace(1.0), resolution=1.0), clipping.MagnitudeClip(Privacy.laplace(2.0), resolution=1.0)
    size = clipping.magnitude_edges().size
    bins = np.array([0, 5, clip.first - 1, clip.first, clip.first + 1, clip.first + 40, size - 2, size - 1])
    rng = np.random.default_rng(1)
    worst, loose = 0.0, 0.0
    for _ in range(60):
        histogram = np.bincount(rng.choice(bins, size=rng.integers(0, 4)), minlength=size)
        law, doubled = _magnitude_law(clip, histogram), _magnitude_law(broken, histogram)
        for point in bins:
            neighbour = histogram.copy()
            neighbour[point] += 1
            worst = max(worst, float(np.max(np.abs(np.log(law / _magnitude_law(clip, neighbour))))))
            loose = max(loose, float(np.max(np.abs(np.log(doubled / _magnitude_law(broken, neighbour))))))
    assert worst <= 1.0 + 1e-6 < 1.5 < loose


def test_the_magnitude_clip_lands_just_beyond_dense_values_and_never_below_the_spacing() -> None:
    values = np.random.default_rng(2).integers(1, 50_000, 5000)
    codes = 1 + (np.floor(np.log2(values)).astype(np.int64) - clipping.LOWEST_OCTAVE) * 2**clipping.MANTISSA_BITS
    codes += np.floor((values / 2.0 ** np.floor(np.log2(values)) - 1) * 2**clipping.MANTISSA_BITS).astype(np.int64)
    histogram = np.bincount(clipping.magnitude_bins(codes), minlength=clipping.magnitude_edges().size)
    clip = clipping.MagnitudeClip(Privacy.laplace(0.5), resolution=1.0)
    edges = clipping.magnitude_edges()
    chosen = [edges[clip.release(histogram, rng=seed)] for seed in range(20)]
    assert all(45_000 < c < 60_000 for c in chosen)
    assert edges[clip.most_likely(np.zeros(edges.size))] == edges[clip.first] and 1.0 < edges[clip.first] < 1.1
