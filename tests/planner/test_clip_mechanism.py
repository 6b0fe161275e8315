"""The private upper clip (``planner.clipping``): its candidates, its exact law, its privacy on every
neighbour of small histograms, and where it lands on light- and heavy-tailed data."""

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


def _law(clip: UpperClip, histogram: np.ndarray, halve: bool = False) -> np.ndarray:
    """The mechanism's exact law by its formula, with the quantised ε and the rounded base measure."""
    counts = np.cumsum(histogram)
    clips = np.array(clip.candidates)
    above = counts[-1] - counts[clips]
    inside = counts[clips] - np.concatenate([[0], counts[clips[:-1]]])
    score = np.abs(above - clipping.ROWS_ABOVE) - np.minimum(inside, clipping.ROWS_INSIDE)
    epsilon = math.floor(clip.privacy.epsilon * 2**clipping.EPSILON_BITS) / 2**clipping.EPSILON_BITS  # type: ignore[operator]
    prior = np.round(clipping.PRIOR_POWER * np.log(clips / clips[0]) * 2**clipping.EPSILON_BITS) / 2**clipping.EPSILON_BITS
    log_weight = -epsilon * (score - score.min()) / (2 * clip.contributions * (0.5 if halve else 1.0)) - prior
    weight = np.exp(log_weight - log_weight.max())
    return weight / weight.sum()


def test_the_mechanism_draws_its_law() -> None:
    histogram = np.array([5, 0, 3, 4, 0, 2, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0])
    clip = UpperClip(16, Privacy.laplace(1.0))
    draws = np.array([clip.release(histogram, rng=seed) for seed in range(3000)])
    expected = _law(clip, histogram)
    frequency = np.array([np.mean(draws == c) for c in clip.candidates])
    assert np.all(np.abs(frequency - expected) <= 4 * np.sqrt(expected * (1 - expected) / draws.size) + 2e-3)


def test_the_clip_is_epsilon_dp_on_every_neighbour_and_not_with_half_the_sensitivity() -> None:
    """Every histogram of up to 3 rows over 9 grid points and every neighbour (a row added anywhere): no
    clip's probability moves by more than e^ε (k = 1); with the sensitivity halved (broken) some does."""
    clip = UpperClip(8, Privacy.laplace(1.0))
    worst, broken = 0.0, 0.0
    rng = np.random.default_rng(0)
    for _ in range(300):
        histogram = np.bincount(rng.integers(0, 9, size=rng.integers(0, 4)), minlength=9)
        law, halved = _law(clip, histogram), _law(clip, histogram, halve=True)
        for point in range(9):
            neighbour = histogram.copy()
            neighbour[point] += 1
            worst = max(worst, float(np.max(np.abs(np.log(law / _law(clip, neighbour))))))
            broken = max(broken, float(np.max(np.abs(np.log(halved / _law(clip, neighbour, halve=True))))))
    assert worst <= 1.0 + 1e-6
    assert broken > 1.5


def test_a_top_coded_column_is_clipped_at_its_top_value() -> None:
    """Light tail: 2,000 rows over 0..98 with 137 at 98, bounds [0, 1000] (one step per integer): the clip is
    at 98 (never below, the rows there count) in most seeded runs at ε = 0.15."""
    histogram = np.zeros(1001, dtype=np.int64)
    histogram[:98] = 19
    histogram[98] = 137
    clip = UpperClip(1000, Privacy.laplace(0.15))
    chosen = np.array([clip.release(histogram, rng=seed) for seed in range(200)])
    assert np.all(chosen >= 98) and np.mean(chosen == 98) > 0.8


def test_the_zcdp_clip_runs_at_the_square_root_of_eight_rho() -> None:
    clip = UpperClip(1000, Privacy.zcdp(0.125 * 0.15**2))
    assert clip._epsilon() == pytest.approx(0.15)
    assert "rho" in clip.describe()


@pytest.mark.parametrize(("privacy", "contributions", "rows"), [
    (Privacy.laplace(0.5), 1, 3 + 2 / 0.5),  # m + 2k/ε: one temperature of the mechanism above the aimed rows
    (Privacy.laplace(0.25), 2, 3 + 4 / 0.25),
    (Privacy.zcdp(0.125), 1, 3 + 2 / 1.0),  # ε = √(8ρ) = 1
])
def test_the_error_bars_assume_one_temperature_of_rows_above_the_aimed_ones(privacy: Privacy, contributions: int, rows: float) -> None:
    clip = UpperClip(64, privacy, contributions)
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
