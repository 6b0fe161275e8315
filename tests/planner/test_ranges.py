"""Range spectra and the eigen-design: closed forms against numpy, exact integer strategy, GLS, error."""

from __future__ import annotations

import math

import numpy as np
import pytest

from range_checks import assert_empirical_error_matches_prediction, assert_noise_free_answers_exact

from planner import (
    AllRange,
    Domain,
    Explicit,
    Factor,
    Identity,
    Predicate,
    Prefix,
    Privacy,
    Product,
    Workload,
    identity_plan,
    plan,
)
from planner.strategies import eigen, hats, hierarchy, pidentity, ranges
from planner.strategies.eigen import SineBasis, range_gram_eigenvalues
from planner.strategies.ranges import Intervals, all_range_variances, block_rows
from planner.workload import Total


@pytest.mark.parametrize("size", [1, 2, 5, 16, 33])
@pytest.mark.parametrize("kind", [AllRange, Prefix])
def test_closed_form_spectra_equal_numpy(size: int, kind: type) -> None:
    block = kind(size)
    assert range_gram_eigenvalues(block) == pytest.approx(np.linalg.eigvalsh(block.gram()), rel=1e-10)


def test_spectra_refuse_other_blocks() -> None:
    with pytest.raises(TypeError, match="Prefix and AllRange"):
        range_gram_eigenvalues(Identity(4))


@pytest.mark.parametrize("size", [1, 7, 16])
@pytest.mark.parametrize("kind", [AllRange, Prefix])
def test_sine_bases_diagonalise_the_grams_and_fast_transforms_match(size: int, kind: type) -> None:
    basis = SineBasis(kind, size)
    V = basis.matrix()
    assert V.T @ V == pytest.approx(np.eye(size), abs=1e-12)
    gram = kind(size).gram()
    assert gram @ V == pytest.approx(V * basis.eigenvalues, rel=1e-10, abs=1e-9)
    x = np.random.default_rng(size).normal(size=(size, 3))
    assert basis.analyse(x) == pytest.approx(V.T @ x, abs=1e-12)
    assert basis.synthesise(x) == pytest.approx(V @ x, abs=1e-12)
    spectrum = np.random.default_rng(size + 1).uniform(0.5, 2.0, size)
    function = basis.function(spectrum)
    dense = (V * spectrum) @ V.T
    assert function.rows(0, size) == pytest.approx(dense, abs=1e-12)
    assert function.diagonal() == pytest.approx(np.diag(dense), abs=1e-12)
    assert function.rows(size // 3, size // 2 + 1) == pytest.approx(dense[size // 3 : size // 2 + 1], abs=1e-12)


def range_workload(size: int) -> Workload:
    dom = Domain({"sex": 2, "age": size}, ordered={"age"})
    mask = np.zeros(size, dtype=bool)
    mask[[0, 3, 4]] = True
    return Workload(dom, (
        Product(dom, (Factor(("sex",), Identity(2)), Factor(("age",), AllRange(size)))),
        Product(dom, (Factor(("age",), Prefix(size)),), 0.5),
        Product(dom, (Factor(("age",), Predicate(mask)),)),
        Product(dom, (Factor(("sex",), Identity(2)), Factor(("age",), Total(size)))),
        Product(dom, (Factor(("age",), Identity(size)),), 2.0),
    ))


def test_integer_design_has_unit_columns_and_exact_sensitivity() -> None:
    (candidate,) = eigen.candidates(range_workload(24), Privacy.zcdp(0.5), contributions=3)
    design = candidate.design
    V = design.basis.matrix()
    root = (V * design.spectrum**0.25) @ V.T  # G^{1/4} densely
    assert design.column_scales == pytest.approx(1 / np.linalg.norm(root, axis=0), rel=1e-12)
    real = np.vstack([design.real_rows(start, min(start + 5, 24)) for start in range(0, 24, 5)])
    assert real == pytest.approx(root * design.column_scales, abs=1e-12)
    assert np.linalg.norm(real, axis=0) == pytest.approx(np.ones(24), rel=1e-12)
    assert design.scale == 2.0**eigen.SCALE_BITS / np.abs(real).max()
    assert design.integer.dtype == np.int64
    assert np.array_equal(design.integer, np.rint(real * design.scale))
    assert np.abs(design.integer).max() == 2**eigen.SCALE_BITS
    assert design.max_column_norm2 == max(sum(int(v) ** 2 for v in column) for column in design.integer.T)
    assert candidate.noise.parameter == pytest.approx(9 * design.max_column_norm2 / (2 * 0.5), rel=1e-15)
    assert candidate.noise.parameter * 2 * 0.5 >= 9 * design.max_column_norm2  # rounding never lowers σ²


@pytest.mark.parametrize("rho,bits", [(1.0, eigen.SCALE_BITS), (1e-5, eigen.MIN_SCALE_BITS)])
def test_variances_match_dense_gls_of_the_integer_strategy(rho: float, bits: int) -> None:
    """The structured variances (unrounded design) are within 1e-6 of the exact dense ones for S', also
    when a tiny ρ forces fewer integer bits (σ² would exceed the exact sampler's range at 2^24)."""
    workload = range_workload(24)
    (candidate,) = eigen.candidates(workload, Privacy.zcdp(rho))
    assert candidate.design.scale_bits == bits
    S = candidate.design.integer.astype(float)
    age = candidate.noise.variance * np.linalg.inv(S.T @ S)
    full = np.kron(np.eye(2), age)  # domain order (sex, age) = measured order
    for product, got in zip(workload.products, candidate.query_variances()):
        W = product.matrix_on(("sex", "age"))
        assert got == pytest.approx(np.einsum("ij,jk,ik->i", W, full, W), rel=1e-6)
    summed = sum(p.weight**2 * v.sum() for p, v in zip(workload.products, candidate.query_variances()))
    assert candidate.expected_error() == pytest.approx(summed, rel=1e-10)  # closed-form traces


def test_row_blocks_give_the_same_design_and_covariance_as_one_dense_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """S', its scale and K = LΣLᵀ built from 2-row blocks equal the one-block results bit for bit, and
    K equals the double cumulative sum of the dense Σ (generated rows for eigen, a dense one for hats)."""
    workload = range_workload(24)
    (whole,) = eigen.candidates(workload, Privacy.zcdp(1.0))
    monkeypatch.setattr(ranges, "BLOCK_ENTRIES", 2 * 24)
    assert len(ranges.block_bounds(24)) == 12
    (blocked,) = eigen.candidates(workload, Privacy.zcdp(1.0))
    assert blocked.design.scale == whole.design.scale
    assert np.array_equal(blocked.design.integer, whole.design.integer)
    assert blocked.noise.variance == whole.noise.variance
    assert np.array_equal(blocked.covariance.prefix_covariance, whole.covariance.prefix_covariance)
    (hat,) = hats.candidates(workload, Privacy.laplace(1.0))  # a dense Σ_t, sliced into blocks
    for covariance in (blocked.covariance, hat.covariance):
        dense = np.zeros((25, 25))
        dense[1:, 1:] = covariance.matrix().cumsum(axis=0).cumsum(axis=1)
        K = covariance.prefix_covariance
        assert K == pytest.approx(dense, rel=1e-12, abs=1e-12 * np.abs(dense).max())


def test_refinement_solves_the_integer_system_to_floating_point() -> None:
    (candidate,) = eigen.candidates(range_workload(40), Privacy.zcdp(1.0))
    design = candidate.design
    y = np.random.default_rng(7).normal(scale=1e8, size=(40, 3))
    want = np.linalg.solve(design.integer.astype(float), y)
    assert design.solve(y) == pytest.approx(want, rel=1e-10, abs=1e-10 * np.abs(want).max())
    assert np.array_equal(design.solve(np.zeros((40, 2))), np.zeros((40, 2)))


def test_all_range_variances_equal_the_gathered_interval_formula() -> None:
    size = 9
    K = np.random.default_rng(3).normal(size=(size + 1, size + 1))
    K = K @ K.T
    intervals = block_rows(AllRange(size))
    assert isinstance(intervals, Intervals)
    start, stop = intervals.lows, intervals.highs + 1
    assert np.array_equal(all_range_variances(K), K[stop, stop] + K[start, start] - 2 * K[start, stop])


def test_all_range_answers_along_a_middle_axis_equal_the_dense_product() -> None:
    tensor = np.random.default_rng(5).integers(-50, 50, size=(3, 7, 2)).astype(float)
    got = AllRange(7).apply(tensor, 1)
    assert got.shape == (3, 28, 2)
    assert np.array_equal(got, np.einsum("rj,ajb->arb", AllRange(7).matrix(), tensor))


def test_exact_measurement_is_solved_exactly() -> None:
    workload = range_workload(40)
    (candidate,) = eigen.candidates(workload, Privacy.zcdp(1.0))
    data = np.random.default_rng(4).integers(0, 1000, size=(2, 40))
    assert_noise_free_answers_exact(candidate, workload, data, tolerance=1e-6)


def test_empirical_error_matches_the_prediction() -> None:
    """800 independent repetitions within 4 standard errors of the prediction."""
    assert_empirical_error_matches_prediction(eigen.candidates, Privacy.zcdp(2.0), 12, high=50, data_seed=1, noise_seed=3)


@pytest.mark.parametrize("kind, target", [(AllRange, 1.05), (Prefix, 1.05)])
def test_eigen_design_is_near_the_svd_bound(kind: type, target: float) -> None:
    size = 1024
    dom = Domain({"age": size}, ordered={"age"})
    workload = Workload(dom, (Product(dom, (Factor(("age",), kind(size)),)),))
    (candidate,) = eigen.candidates(workload, Privacy.zcdp(1.0))
    bound = np.sqrt(range_gram_eigenvalues(kind(size))).sum() ** 2 / (2 * size)
    assert 1.0 < candidate.expected_error() / bound <= target


def test_laplace_is_left_to_hierarchies() -> None:
    dom = Domain({"age": 64}, ordered={"age"})
    assert eigen.candidates(Workload.all_range(dom, "age"), Privacy.laplace(1.0)) == []


def test_eigen_design_beats_the_best_hierarchy_under_zcdp() -> None:
    dom = Domain({"age": 128}, ordered={"age"})
    workload = Workload.all_range(dom, "age")
    (design,) = eigen.candidates(workload, Privacy.zcdp(1.0))
    (tree,) = hierarchy.candidates(workload, Privacy.zcdp(1.0))
    assert design.expected_error() < 0.8 * tree.expected_error()


# --------------------------------------------------------------------------------------------------
# Hat hierarchies (ε-DP).
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size, spacing", [(10, 1), (10, 2), (10, 3), (17, 4), (8, 8), (8, 16)])
def test_hat_levels_have_equal_integer_column_sums(size: int, spacing: int) -> None:
    rows = hats.hat_rows(size, spacing)
    assert rows.dtype == np.int64 and (rows >= 0).all()
    assert np.array_equal(rows.sum(axis=0), np.full(size, hats.magnitude(size, spacing)))


@pytest.mark.parametrize("cells, others, paired", [(64, 6, True), (63, 6, True), (40, 3, False), (20, 12, False), (9, 0, True)])
def test_gram_inverse_by_woodbury_equals_the_dense_inverse(cells: int, others: int, paired: bool) -> None:
    """``(RᵀR)⁻¹`` for rows within pairs of cells (ridge pairs mix two, leaves one) and a few wide rows
    equals the dense inverse; with as many wide rows as half the cells it takes the dense route."""
    rng = np.random.default_rng(cells + others)
    local = []
    for first in range(0, cells, 2):
        block = np.zeros((2, cells))
        width = min(2, cells - first)
        block[:, first : first + width] = rng.uniform(0.5, 3.0, (2, width)) * ([[1, 1], [1, -1]] if paired and width == 2 else np.eye(2)[:, :width])
        local.append(block[: width if not paired else 2])
    wide = np.where(rng.uniform(size=(others, cells)) < 0.3, rng.uniform(0.0, 40.0, (others, cells)), 0.0)
    rows = np.vstack([*local, wide, np.zeros((1, cells))])[rng.permutation(sum(len(b) for b in local) + others + 1)]
    expected = np.linalg.inv(rows.T @ rows)
    assert np.allclose(hats.gram_inverse(rows), expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max())


def test_hat_variances_equal_brute_force_and_answers_are_exact() -> None:
    workload = range_workload(24)
    (candidate,) = hats.candidates(workload, Privacy.laplace(0.8), contributions=2)
    assert candidate.name.startswith("hats(b=")
    levels = [np.kron(np.eye(2), r) for r in candidate.rows]  # per sex cell, domain order (sex, age)
    scales = [2 * hats.magnitude(24, s) / b for s, b in zip(candidate.spacings, candidate.budgets)]
    variances = [2 * math.exp(-1 / b) / (1 - math.exp(-1 / b)) ** 2 for b in scales]  # discrete Laplace
    full = np.linalg.inv(sum(L.T @ L / v for L, v in zip(levels, variances)))
    got = candidate.query_variances()
    for product, variance in zip(workload.products, got):
        W = product.matrix_on(("sex", "age"))
        assert variance == pytest.approx(np.einsum("ij,jk,ik->i", W, full, W), rel=1e-5)
    assert sum(g.budget for g in candidate.group_budgets()) == pytest.approx(0.8, rel=1e-12)
    data = np.random.default_rng(6).integers(0, 100, size=(2, 24))
    assert_noise_free_answers_exact(candidate, workload, data, tolerance=1e-7)


def test_hat_empirical_error_matches_the_prediction() -> None:
    repetitions, size = 800, 16
    dom = Domain({"rep": repetitions, "age": size}, ordered={"age"})
    workload = Workload(dom, (Product(dom, (Factor(("rep",), Identity(repetitions)), Factor(("age",), Prefix(size)))),))
    (candidate,) = hats.candidates(workload, Privacy.laplace(1.0))
    data = np.random.default_rng(2).integers(0, 50, size=(repetitions, size))
    truth = workload.answer({("rep", "age"): data})[0]
    answers = candidate.answer(candidate.measure({("rep", "age"): data}, rng=8)).values[0]
    errors = ((answers - truth) ** 2).reshape(repetitions, -1).sum(axis=1)
    assert abs(errors.mean() - candidate.expected_error() / repetitions) < 4 * errors.std(ddof=1) / math.sqrt(repetitions)


@pytest.mark.parametrize("kind", [AllRange, Prefix])
def test_hats_beat_the_best_box_tree(kind: type) -> None:
    size = 256
    dom = Domain({"age": size}, ordered={"age"})
    workload = Workload(dom, (Product(dom, (Factor(("age",), kind(size)),)),))
    (hat,) = hats.candidates(workload, Privacy.laplace(1.0))
    (tree,) = hierarchy.candidates(workload, Privacy.laplace(1.0))
    assert hat.expected_error() < 0.9 * tree.expected_error()
    assert hats.candidates(workload, Privacy.zcdp(1.0)) == []


def test_a_range_predicate_beside_marginals_plans_and_measures() -> None:
    """Regression: one range predicate next to marginals leaves the tree's leaves (almost) no recovery
    mass; their budget must stay positive and samplable instead of a ~1e-17 share (scale ~1e17)."""
    dom = Domain({"age": 74, "sex": 2}, ordered={"age"})
    in_range = np.zeros(74, dtype=bool)
    in_range[8:18] = True
    workload = Workload(dom, (Product(dom, (Factor(("age",), Predicate(in_range)),)),))
    workload = workload + Workload.marginals(dom, [("sex",), ()])
    for candidate in hierarchy.candidates(workload, Privacy.laplace(0.7), 3) + hats.candidates(
        workload, Privacy.laplace(0.7), 3
    ):
        budgets = candidate.group_budgets()
        assert sum(g.budget for g in budgets) == pytest.approx(0.7)
        assert all(g.budget > 0 and np.isfinite(g.noise_variance) for g in budgets)
    chosen = plan(workload, Privacy.laplace(0.7), contributions=3)
    counts = np.arange(148).reshape(74, 2)
    answers = chosen.answer(chosen.measure({("age", "sex"): counts}, rng=1, noise=False))
    assert answers.values[0][0] == pytest.approx(counts[8:18].sum())


def test_eigen_is_not_offered_when_no_integer_scale_fits_the_noise_sampler() -> None:
    workload = range_workload(24)
    assert eigen.candidates(workload, Privacy.zcdp(1e-6)) == []
    assert plan(workload, Privacy.zcdp(1e-6)).strategy_name != "eigen"  # another family answers


def test_hats_for_a_few_interval_predicates_stay_well_conditioned() -> None:
    """Two intervals and the total on 74 cells, starting from leaves at 10⁻⁶ ε (what the box tree gave):
    the dense GLS has condition number ~10¹², and the budget polish followed rounding noise (budgets, plan and stated
    variances changed with the BLAS thread count). The finest hat level keeps ε/256: perturbing the
    starting budgets by 10⁻¹⁵ must not move the result (beyond 1e-6; it used to jump to other budgets), and the stated error equals triangular solves on
    the Cholesky factor (stable) to 1e-9."""
    from scipy.linalg import cholesky, solve_triangular

    size = 74
    dom = Domain({"age": size}, ordered={"age"})
    cells = np.arange(size)
    workload = Workload(dom, tuple(
        Product(dom, (Factor(("age",), Predicate((cells >= low) & (cells <= high))),)) for low, high in [(8, 17), (18, 43)]
    )) + Workload.total(dom)
    (tree,) = hierarchy.candidates(workload, Privacy.laplace(1.0))
    measured = tree.budgets > 0
    spacings = [s for s, kept in zip(tree.tree.block_sizes, measured) if kept]
    layout = ranges.range_layouts(workload)[0]
    start = tree.budgets[measured].copy()
    start[-1] = 1e-6  # the leaf share trees used to give (PRUNE_SHARE was 1e-6): an ill-conditioned start
    gram = ranges.GramOperator(layout)
    reference = hats._polished_shares(size, spacings, start, gram)  # the polish itself, not memoized
    rng = np.random.default_rng(5)
    for _ in range(5):
        perturbed = start * (1 + 1e-15 * rng.standard_normal(start.size))
        np.testing.assert_allclose(hats._polished_shares(size, spacings, perturbed, gram), reference, rtol=1e-6, atol=1e-9)

    (candidate,) = hats.candidates(workload, Privacy.laplace(1.0))
    assert candidate.spacings[-1] == 1 and candidate.budgets[-1] >= 2.0**-8 * (1 - 1e-12)
    precision = sum(r.T.astype(float) @ r / n.variance for r, n in zip(candidate.rows, candidate.noises))
    factor = cholesky(precision, lower=True)
    queries = np.vstack([p.matrix_on(("age",)) for p in workload.products])
    stable = float((solve_triangular(factor, queries.T, lower=True) ** 2).sum())
    assert candidate.expected_error() == pytest.approx(stable, rel=1e-9)


@pytest.mark.parametrize(
    ("family", "privacy"),
    [(hats, Privacy.laplace(1.0)), (hierarchy, Privacy.laplace(1.0)), (pidentity, Privacy.laplace(1.0)), (eigen, Privacy.zcdp(0.5))],
)
def test_variances_of_a_product_outside_the_workload_match_the_empirical_ones(family: object, privacy: Privacy) -> None:
    """``variances_of`` answers a product the plan was not made for: here ``F(k) − ½·F(n−1)`` per repetition
    (a quantile's rank error), whose variance the per-query variances cannot give (it needs the covariance of
    ``F(k)`` with ``F(n−1)``). Over 800 repetitions the empirical variance of every row agrees with it within
    4 standard errors (an estimate leaving the covariance out, ``Var F(k) + ¼ Var F(n−1)``, is too high by
    more than 1.3× on average here and fails); a workload product gets its query variances back."""
    repetitions, size = 800, 16
    dom = Domain({"rep": repetitions, "age": size}, ordered={"age"})
    prefix = Product(dom, (Factor(("rep",), Identity(repetitions)), Factor(("age",), Prefix(size))))
    workload = Workload(dom, (prefix,))
    (candidate,) = family.candidates(workload, privacy)  # type: ignore[attr-defined]
    ranks = np.tril(np.ones((size, size))) - 0.5
    rank_product = Product(dom, (Factor(("rep",), Identity(repetitions)), Factor(("age",), Explicit(ranks))))
    predicted = candidate.variances_of(rank_product).reshape(repetitions, size)[0]
    data = np.random.default_rng(2).integers(0, 50, size=(repetitions, size))
    truth = workload.answer({("rep", "age"): data})[0].reshape(repetitions, size)
    answers = candidate.answer(candidate.measure({("rep", "age"): data}, rng=8)).values[0].reshape(repetitions, size)
    errors = (answers - truth) - 0.5 * (answers - truth)[:, -1:]
    empirical = errors.var(axis=0)
    assert np.all(np.abs(empirical - predicted) < 4 * predicted * math.sqrt(2 / (repetitions - 1)))
    np.testing.assert_allclose(candidate.variances_of(prefix), candidate.query_variances()[0])
    variances = candidate.query_variances()[0].reshape(repetitions, size)[0]
    assert np.mean(variances + 0.25 * variances[-1]) > 1.3 * np.mean(predicted)


def test_variances_of_is_none_where_the_strategy_does_not_offer_it() -> None:
    dom = Domain({"age": 8}, ordered={"age"})
    workload = Workload(dom, (Product(dom, (Factor(("age",), Prefix(8)),)),))
    chosen = plan(workload, Privacy.laplace(1.0))
    other = Domain({"age": 8, "sex": 2}, ordered={"age"})
    assert chosen.variances_of(Product(other, (Factor(("sex",), Identity(2)),))) is None
    assert identity_plan(workload, Privacy.laplace(1.0)).variances_of(workload.products[0]) is None
