"""R2T (planner.RaceToTheTop): levels, noise and shifts in closed form, the release without noise, the exact
mean error against direct summation and against simulation, and the guarantee's two sides empirically."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner import Privacy, RaceToTheTop


@pytest.mark.parametrize(("largest", "levels"), [(1, (1,)), (2, (1, 2)), (8, (1, 2, 4, 8)), (9, (1, 2, 4, 8, 16))])
def test_levels_reach_the_largest_contribution(largest: int, levels: tuple[int, ...]) -> None:
    assert RaceToTheTop.design(Privacy.laplace(1.0), largest).truncations == levels


def test_laplace_levels_share_epsilon_and_scale_with_the_truncation() -> None:
    r2t = RaceToTheTop.design(Privacy.laplace(0.5), largest=8, row_weight=3, beta=0.05)
    n = 4
    assert r2t.level_privacy.epsilon * n == pytest.approx(0.5)
    np.testing.assert_allclose(r2t.noise_parameters, [n * t * 3 / 0.5 for t in (1, 2, 4, 8)])
    q = np.exp(-1 / r2t.noise_parameters)
    # the discrete Laplace tail P(Z ≥ s) = q^s / (1 + q) is β/(2n) at the shift, exactly
    np.testing.assert_allclose(q**r2t.shifts / (1 + q), 0.05 / (2 * n), rtol=1e-12)


def test_gaussian_levels_share_rho() -> None:
    r2t = RaceToTheTop.design(Privacy.zcdp(0.5), largest=4, beta=0.1)
    n = 3
    np.testing.assert_allclose(r2t.noise_parameters, [n * t**2 / (2 * 0.5) for t in (1, 2, 4)])
    np.testing.assert_allclose(np.exp(-(r2t.shifts**2) / (2 * r2t.noise_parameters)), 0.1 / (2 * n), rtol=1e-12)


def test_without_noise_the_largest_shifted_answer_or_the_floor_is_released() -> None:
    r2t = RaceToTheTop.design(Privacy.laplace(1.0), largest=4)
    s = r2t.shifts
    answers = np.array([[100, 3, 0], [190, 4, 0], [200, 4, 0]])  # three cells, levels 1, 2, 4
    released = r2t.release(answers, noise=False)
    expected_first = max(100 - s[0], 190 - s[1], 200 - s[2])
    np.testing.assert_allclose(released.values, [expected_first, 0.0, 0.0])
    assert released.levels.tolist() == [[1, 2, 4][int(np.argmax([100 - s[0], 190 - s[1], 200 - s[2]]))], 0, 0]


def test_expected_error_of_one_level_is_the_direct_sum_over_the_noise_law() -> None:
    r2t = RaceToTheTop(Privacy.laplace(0.8), (1,), floor=-1e6)
    b = float(r2t.noise_parameters[0])
    q = math.exp(-1 / b)
    z = np.arange(-2000, 2001)
    law = (1 - q) / (1 + q) * q ** np.abs(z)
    for answer, truth in ((40, 40), (40, 45), (40, 31.5)):
        direct = float(np.sum(law * np.abs(answer - r2t.shifts[0] + z - truth)))
        assert r2t.expected_error(np.array([answer]), truth) == pytest.approx(direct, rel=1e-10)


@pytest.mark.parametrize("privacy", [Privacy.laplace(1.0), Privacy.zcdp(0.5)])
def test_expected_error_matches_simulation(privacy: Privacy) -> None:
    r2t = RaceToTheTop.design(privacy, largest=16)
    answers = np.array([60, 90, 110, 118, 120])  # a heavy unit loses rows below τ = 16
    runs = 40_000
    released = r2t.release(np.repeat(answers[:, None], runs, axis=1), rng=3).values
    errors = np.abs(released - 120)
    predicted = r2t.expected_error(answers, 120)
    assert abs(errors.mean() - predicted) < 4 * errors.std() / math.sqrt(runs), (errors.mean(), predicted)


def test_the_guarantee_holds_on_both_sides() -> None:
    """P(Q̃ > Q) ≤ β/2 (no level exceeds its answer) and P(Q̃ < Q − error_bound(τ*)) ≤ β/(2n), empirically."""
    r2t = RaceToTheTop.design(Privacy.laplace(1.0), largest=32, beta=0.2)
    answers = np.array([40, 70, 95, 100, 100, 100])  # τ* = 8: levels from 8 on answer Q = 100
    runs = 40_000
    released = r2t.release(np.repeat(answers[:, None], runs, axis=1), rng=5).values
    above, far_below = np.mean(released > 100), np.mean(released < 100 - r2t.error_bound(8))
    assert r2t.error_bound(8) == pytest.approx(2 * r2t.shifts[3])
    assert above <= 0.1 + 3 * math.sqrt(0.1 / runs) and far_below <= 0.2 / 12 + 3 * math.sqrt(0.02 / runs), (above, far_below)
    assert above > 0  # the bound is not vacuous: levels do overshoot sometimes
    assert r2t.error_bound(33) == math.inf and r2t.error_bound(0) == pytest.approx(2 * r2t.shifts[0])


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="truncations"):
        RaceToTheTop(Privacy.laplace(1.0), (1, 3))
    with pytest.raises(ValueError, match="largest"):
        RaceToTheTop.design(Privacy.laplace(1.0), largest=0)
    r2t = RaceToTheTop.design(Privacy.laplace(1.0), largest=2)
    with pytest.raises(ValueError, match="one row per level"):
        r2t.release(np.zeros((3, 1), dtype=np.int64))
    with pytest.raises(ValueError, match="integers"):
        r2t.release(np.zeros(2))


def test_choose_trades_the_truncated_rows_against_the_penalty() -> None:
    """Noise off: the level maximising answer − shift − penalty·τ; a larger penalty never chooses a larger level."""
    r2t = RaceToTheTop.design(Privacy.laplace(10.0), largest=8)
    answers = np.array([1000, 1800, 2500, 2600])  # most of the gain is reached at τ = 4
    s = r2t.shifts
    for penalty in (0.0, 10.0, 200.0, 5000.0):
        expected = [1, 2, 4, 8][int(np.argmax(answers - s - penalty * np.array([1, 2, 4, 8])))]
        assert r2t.choose(answers, penalty, noise=False) == expected
    chosen = [r2t.choose(answers, p, noise=False) for p in (0.0, 10.0, 200.0, 5000.0)]
    assert chosen == sorted(chosen, reverse=True) and chosen[0] > chosen[-1]
    with pytest.raises(ValueError, match="penalty"):
        r2t.choose(answers, -1.0)


def test_bound_choice_estimates_lost_rows_and_prices_the_bound() -> None:
    """The rows each bound loses, from the histogram of units by the level of their last row, in closed form; the choice
    is the least of lost rows plus the penalty; the noise is calibrated to the fan-out (one unit: one bucket)."""
    from planner import BoundChoice

    choice = BoundChoice(Privacy.laplace(0.5), (1, 2, 4, 8), penalty=30.0, fan_out=3)
    histogram = np.array([500, 300, 100, 40])  # middles of the buckets: 1, 1.5, 3, 6 rows
    np.testing.assert_allclose(choice.lost_rows(histogram), [300 * 0.5 + 100 * 2 + 40 * 5, 100 * 1 + 40 * 4, 40 * 2, 0])
    assert choice.choose(histogram, noise=False) == 4  # 550 + 30, 260 + 60, 80 + 120, 0 + 240
    assert BoundChoice(Privacy.laplace(0.5), (1, 2, 4, 8), penalty=0.0).choose(histogram, noise=False) == 8
    assert choice.noise_parameter == pytest.approx(3 / 0.5)
    assert BoundChoice(Privacy.zcdp(0.5), (1, 2), 1.0, fan_out=2).noise_parameter == pytest.approx(4 / 1.0)
    draws = [choice.choose(histogram, rng=seed) for seed in range(200)]
    assert set(draws) <= {2, 4, 8} and draws.count(4) > 150  # the noise (scale 6) rarely moves a choice this clear
    with pytest.raises(ValueError, match="one integer per level"):
        choice.choose(np.array([1, 2]))


def test_bound_levels_are_a_grid_of_ratio_root_two_ending_at_the_largest_bound() -> None:
    """The bounds a statement chooses among: the powers of two and the integers nearest 2^i·√2 between them, the last
    the largest bound itself, so some level lies within a factor √2 of any contribution up to it."""
    from planner import bound_levels

    assert bound_levels(1) == (1,)
    assert bound_levels(16) == (1, 2, 3, 4, 6, 8, 11, 16)
    assert bound_levels(300) == (1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256, 300)
    for largest in (2, 5, 1000, 1024, 2**30):
        levels = np.array(bound_levels(largest))
        assert levels[0] == 1 and levels[-1] == largest and np.all(np.diff(levels) > 0)
        assert np.all(levels[1:] / levels[:-1] <= 2.0)  # no contribution is more than √2 (rounded: 2 at the start) from a level
        assert np.all(levels[2:-1] / levels[1:-2] <= 1.5)  # from 2 on: 3/2, 4/3, 6/4, 8/6, 11/8, …
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="largest must be a positive integer"):
            bound_levels(bad)  # type: ignore[arg-type]


def test_bound_choice_on_a_finer_grid_keeps_a_bound_near_the_heaviest_units() -> None:
    """Units of 257–300 rows: on the grid of ratio √2 the least lost rows plus penalty is 300 (all rows, a bound 1.7×
    smaller than 512, the next power of two); the buckets' middles are those of the grid's intervals."""
    from planner import BoundChoice, bound_levels

    levels = bound_levels(300)
    choice = BoundChoice(Privacy.laplace(1.0), levels, penalty=1.0)
    histogram = np.zeros(len(levels), dtype=np.int64)
    histogram[0], histogram[-1] = 1000, 50  # 50 units in (256, 300]: middle 278
    lost = choice.lost_rows(histogram)
    assert lost[-2] == pytest.approx(50 * (278 - 256)) and lost[-1] == 0
    assert choice.choose(histogram, noise=False) == 300
    with pytest.raises(ValueError, match="increasing integers from 1"):
        BoundChoice(Privacy.laplace(1.0), (1, 3, 3), penalty=1.0)
    with pytest.raises(ValueError, match="increasing integers from 1"):
        BoundChoice(Privacy.laplace(1.0), (2, 4), penalty=1.0)
