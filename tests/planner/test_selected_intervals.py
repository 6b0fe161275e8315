"""Error bars of counts released because their key's noisy total reached the threshold
(``planner.selected_intervals``): the noise law inverted given the selection, checked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner import Privacy, selected_errors
from planner.keyed_release import KeyedRelease

Z = 1.959964


def _release(privacy: Privacy, threshold: int = 14) -> KeyedRelease:
    return KeyedRelease(privacy, 1.0, privacy, None, 2, 1, 1, 1, threshold, 1e-6, 0.0)


def test_far_above_the_threshold_the_band_is_the_noise_laws_own() -> None:
    """A discrete Laplace draw of scale 1 (q = 1/e): P(Z ≥ h) = q^h/(1 + q), which exceeds 2.5 % up to h = 3 —
    the band is ±3, while the normal one, ±1.96·sd = ±2.66, holds only |Z| ≤ 2 (92.7 %). A sum of two
    cells (the key's total) by the convolved law: the largest h with P(Z₁ + Z₂ ≥ h) > 2.5 %."""
    release = _release(Privacy.laplace(1.0))
    q = math.exp(-1.0)
    single = max(h for h in range(1, 30) if q**h / (1 + q) > 0.025)
    support = np.arange(-60, 61)
    law = (1 - q) / (1 + q) * q ** np.abs(support)
    pair = np.convolve(law, law)
    pair_support = np.arange(-120, 121)
    double = max(h for h in range(1, 30) if pair[pair_support >= h].sum() > 0.025)
    errors = selected_errors(release, np.array([500.0, 250.0]), np.array([2, 1]), np.array([500.0, 500.0]))
    assert (single, double) == (3, 4)
    assert errors * Z == pytest.approx([double, single], rel=1e-6)


def test_near_the_threshold_the_band_reaches_down_to_zero() -> None:
    """A key just over the threshold could be a small count pushed up by its noise: with its total 2 above
    t, P(Y ≥ y | Y ≥ t) tends to q² = 0.135 > 2.5 % as the count falls, so no count is excluded below; the
    band is [0, y + h] and the error y/z. Far enough above (q^g ≤ 2.5 %: g ≥ 4) it is bounded again."""
    release = _release(Privacy.laplace(1.0))
    near, far = selected_errors(release, np.array([16.0, 60.0]), np.array([1, 1]), np.array([16.0, 60.0])) * Z
    assert near == pytest.approx(16.0) and far == pytest.approx(3.0)
    y = np.array([release.threshold + g for g in range(0, 8)], dtype=float)
    errors = selected_errors(release, y, np.ones(len(y)), y) * Z
    reaches_zero = [bool(np.isclose(e, v)) for e, v in zip(errors, y)]
    assert reaches_zero == [True, True, True, True, False, False, False, False]


def test_a_row_of_no_cells_is_exact_and_a_wide_law_at_the_threshold_is_bounded() -> None:
    assert selected_errors(_release(Privacy.laplace(1.0)), np.array([0.0]), np.array([0]), np.array([30.0])).tolist() == [0.0]
    wide = _release(Privacy.laplace(0.01), threshold=3000)  # scale 100: at y = t every count fails the lower test
    (error,) = selected_errors(wide, np.array([3000.0]), np.array([1]), np.array([3000.0]))
    assert math.isfinite(error) and error * Z >= 3000.0  # the one-sided (conservative) answer, never a failure


def test_gaussian_rows_beyond_the_exact_laws_use_the_normal_law() -> None:
    """40 cells (more than the exact convolution handles): the normal law of the sum, σ² = 40·4, ±1.96σ far
    above the threshold (with the continuity correction: the largest h with P(N ≥ h − ½) > 2.5 %)."""
    release = _release(Privacy.zcdp(0.125), threshold=60)
    (error,) = selected_errors(release, np.array([5000.0]), np.array([40]), np.array([5000.0]))
    sd = math.sqrt(40 * release.cell_variance)
    expected = max(h for h in range(1, 100) if 0.5 * math.erfc((h - 0.5) / (sd * math.sqrt(2))) > 0.025)
    assert error * Z == pytest.approx(expected)
