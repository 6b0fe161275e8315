"""Selecting keys from their measured counts (planner.keyed_release): the δ of the threshold from the exact
law of a key's noisy total, checked against brute force; thresholds are the least that fit δ; the Chernoff
bounds used for many cells bound the true tail; the split is the grid's best."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from planner import keyed_release
from planner.domain import Domain
from planner.partition import optimal
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


def _noise_variance_matches(rule: keyed_release.KeyedRelease, claimed: float, draws: int = 40_000) -> bool:
    """The empirical variance of the noise ``release`` adds, within 4 standard errors of ``claimed``."""
    counts = np.full((draws // rule.cells, rule.cells), 7)
    noisy, _ = rule.release(counts, rng=np.random.default_rng(3))
    noise = (noisy - counts).astype(float).ravel()
    spread = claimed * math.sqrt(2 / noise.size) * 3  # the sample variance's sd is about σ²·√(2/n) (heavier tails: ×3)
    return abs(float(noise.var()) - claimed) <= 4 * spread


@pytest.mark.parametrize("privacy", [Privacy.laplace(1.0), Privacy.zcdp(0.5)], ids=["laplace", "zcdp"])
def test_release_draws_the_designed_noise_and_keeps_keys_whose_noisy_total_reaches_the_threshold(privacy: Privacy) -> None:
    others = Domain({"x": 2})
    rule = keyed_release.design(privacy, 1e-6, 1, 1, 1, others, (Product(others, (Factor(("x",), Identity(2)),)),), None)
    counts = np.array([[0, 0], [rule.threshold, 0], [rule.threshold - 1, 0]])
    noisy, kept = rule.release(counts, noise=False)
    assert noisy.tolist() == counts.tolist() and kept.tolist() == [False, True, False]
    empty, none = rule.release(np.zeros((0, 2), dtype=np.int64), rng=1)  # no key at all: nothing released, no error
    assert empty.shape == (0, 2) and none.shape == (0,)
    assert _noise_variance_matches(rule, rule.cell_variance)
    # the check has power: a release drawing the noise of twice the budget is caught
    doubled = Privacy.laplace(2 * float(privacy.epsilon)) if privacy.is_laplace else Privacy.zcdp(2 * float(privacy.rho))
    assert not _noise_variance_matches(dataclasses.replace(rule, key_privacy=doubled), rule.cell_variance)
    variances = rule.answer_variances(Product(others, ()), ("x",))  # a key's total: two cells
    assert variances.tolist() == [pytest.approx(2 * rule.cell_variance)]


def test_partition_selection_selects_from_any_counts() -> None:
    primitive = optimal(1.0, 1e-5)
    assert primitive.select(np.zeros(0, dtype=np.int64)).shape == (0,)
    chosen = primitive.select(np.array([0, -3, 10**12, int(primitive.always_kept())]), rng=np.random.default_rng(1))
    assert chosen.tolist() == [False, False, True, True]  # π(0) = 0; counts are clipped where π reaches 1
