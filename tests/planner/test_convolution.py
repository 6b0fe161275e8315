"""The FFT convolution the tail bounds use, against numpy's direct sum."""

from __future__ import annotations

import numpy as np
import pytest

from planner.convolution import fft_convolve


@pytest.mark.parametrize(("first", "second"), [(1, 1), (1, 7), (5, 3), (1000, 77), (4097, 4097)])
def test_equals_the_direct_convolution_to_rounding(first: int, second: int) -> None:
    rng = np.random.default_rng(first * 10_000 + second)
    a, b = rng.random(first), rng.random(second)
    exact = np.convolve(a, b)
    found = fft_convolve(a, b)
    assert found.shape == exact.shape
    assert np.max(np.abs(found - exact)) <= 1e-12 * np.max(exact)


def test_a_probability_law_convolved_with_itself_stays_a_law() -> None:
    law = np.exp(-np.abs(np.arange(-40, 41)) / 3.0)
    law /= law.sum()
    twice = fft_convolve(law, law)
    assert twice.size == 161 and abs(twice.sum() - 1.0) < 1e-12 and twice[80] == pytest.approx(np.convolve(law, law)[80], rel=1e-12)
