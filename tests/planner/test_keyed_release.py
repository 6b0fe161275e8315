"""Selecting keys from their measured counts (planner.keyed_release): the δ of the threshold from the exact
law of a key's noisy total, checked against brute force; thresholds are the least that fit δ; the Chernoff
bounds used for many cells bound the true tail; the split is the grid's best."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from planner import keyed_release
from planner.domain import Domain
from planner.privacy import Privacy
from planner.workload import Factor, Identity, Product


def brute_force_tail(privacy: Privacy, parameter: float, cells: int, excess: int) -> float:
    """P(Z_1 + … + Z_cells ≥ excess) by summing the product law over a box wide enough (mass left out < 1e-14)."""
    if privacy.is_laplace:
        q = math.exp(-1 / parameter)
        half = math.ceil(math.log(1e-16) / math.log(q))
        support = np.arange(-half, half + 1)
        law = (1 - q) / (1 + q) * q ** np.abs(support)
    else:
        half = math.ceil(12 * math.sqrt(parameter)) + 5
        support = np.arange(-half, half + 1)
        law = np.exp(-(support**2) / (2 * parameter))
        law /= law.sum()
    total = 0.0
    for combination in itertools.product(range(len(support)), repeat=cells):
        if sum(support[i] for i in combination) >= excess:
            total += math.prod(law[i] for i in combination)
    return total


@pytest.mark.parametrize(("privacy", "cells"), [(Privacy.laplace(1.0), 1), (Privacy.laplace(0.7), 2), (Privacy.zcdp(0.5), 2), (Privacy.laplace(2.0), 3)])
def test_the_tail_is_an_upper_bound_of_the_exact_law_and_tight(privacy: Privacy, cells: int) -> None:
    parameter = keyed_release.noise_parameter(privacy, 1)
    for excess in (1, 3, 6, 10):
        exact = brute_force_tail(privacy, parameter, cells, excess)
        bound = keyed_release.sum_tail(privacy, parameter, cells, excess)
        assert exact <= bound <= exact * (1 + 1e-6) + 2e-15, (excess, exact, bound)


@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0])
def test_chernoff_bounds_hold_for_many_cells(scale: float) -> None:
    """Past EXACT_MAX_CELLS the bound is Chernoff's: above the exact tail (computed by convolution), not absurdly so."""
    privacy = Privacy.laplace(1 / scale)
    for count, excess in ((40, 20), (40, 60), (64, 90)):
        law_half = 200
        q = math.exp(-1 / scale)
        draw = (1 - q) / (1 + q) * q ** np.abs(np.arange(-law_half, law_half + 1))
        total = draw
        for _ in range(count - 1):
            total = np.convolve(total, draw)
        exact = total[count * law_half + excess :].sum()
        bound = keyed_release.laplace_sum_tail(scale, count, excess)
        assert exact <= bound < max(1e3 * exact, 1e-300) or exact < 1e-30
        assert keyed_release.sum_tail(privacy, scale, count, excess) == bound
    sigma2 = scale**2
    assert keyed_release.gaussian_sum_tail(sigma2, 40, 30) == pytest.approx(math.exp(-900 / (80 * sigma2)))


@pytest.mark.parametrize(("privacy", "cells", "groups", "rows"), [(Privacy.laplace(1.0), 1, 1, 1), (Privacy.laplace(0.8), 2, 2, 3), (Privacy.zcdp(0.3), 4, 1, 2)])
def test_the_threshold_is_the_least_that_fits_delta(privacy: Privacy, cells: int, groups: int, rows: int) -> None:
    sensitivity = min(rows * groups, 3)
    threshold, spent = keyed_release.threshold_for(privacy, sensitivity, cells, groups, rows, 1e-6)
    parameter = keyed_release.noise_parameter(privacy, sensitivity)
    assert spent == groups * keyed_release.sum_tail(privacy, parameter, cells, threshold - rows) <= 1e-6
    assert groups * keyed_release.sum_tail(privacy, parameter, cells, threshold - 1 - rows) > 1e-6


def test_one_cell_matches_laplace_thresholding() -> None:
    from planner.partition import laplace_threshold

    assert keyed_release.threshold_for(Privacy.laplace(1.0), 1, 1, 1, 1, 1e-6)[0] == laplace_threshold(1.0, 1e-6).threshold


def test_the_split_is_the_best_on_the_grid_and_no_totals_take_nothing() -> None:
    def totals(privacy: Privacy) -> float:
        return 2 * 2 / float(privacy.epsilon) ** 2  # two totals, each a Laplace count of variance 2/ε²

    others = Domain({"x": 2})
    per_key = (Product(others, (Factor(("x",), Identity(2)),)), Product(others, ()))  # a key's cells, its total
    assert [keyed_release.mean_norm2(p, others) for p in per_key] == [1.0, 2.0]
    chosen = keyed_release.design(Privacy.laplace(1.0), 1e-6, 1, 1, 1, others, per_key, totals)
    for share in keyed_release.KEY_SHARES:
        other = keyed_release.design(Privacy.laplace(share), 1e-6, 1, 1, 1, others, per_key, None)
        assert chosen.objective <= other.objective + totals(Privacy.laplace(1 - share)) + 1e-9
    assert chosen.totals_privacy is not None and chosen.key_share < 1
    alone = keyed_release.design(Privacy.laplace(1.0), 1e-6, 1, 1, 1, others, per_key, None)
    assert alone.key_share == 1.0 and alone.totals_privacy is None and alone.key_privacy == Privacy.laplace(1.0)
