"""Hierarchies: closed forms against dense brute force, tree GLS against dense GLS, empirical variances."""

from __future__ import annotations

import math

import numpy as np
import pytest

from range_checks import assert_empirical_error_matches_prediction

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
    ShiftedPrefix,
    Total,
    Workload,
    plan,
)
from planner.strategies import hierarchy
from planner.strategies.hierarchy import (
    Tree,
    TreeCovariance,
    recovery_masses,
    tree_error,
)
from planner.strategies.ranges import block_variances, range_layouts


def tree_matrix(tree: Tree, level: int) -> np.ndarray:
    """Dense 0/1 rows of one level over the padded leaves."""
    width = tree.block_sizes[level]
    return np.kron(np.eye(tree.padded // width), np.ones((1, width)))


def dense_covariance(tree: Tree, variances: np.ndarray) -> np.ndarray:
    precision = sum(tree_matrix(tree, l).T @ tree_matrix(tree, l) / v for l, v in enumerate(variances) if np.isfinite(v))
    return np.linalg.inv(precision)


def padded_rows(rows: np.ndarray, tree: Tree) -> np.ndarray:
    out = np.zeros((rows.shape[0], tree.padded))
    out[:, : rows.shape[1]] = rows
    return out


BLOCKS = [AllRange, Prefix, Identity, Total]


@pytest.mark.parametrize("size, branching", [(13, 2), (13, 3), (16, 4), (27, 3), (30, 4)])
def test_tree_shape_covers_the_domain_with_little_padding(size: int, branching: int) -> None:
    tree = Tree.with_branching(size, branching)
    assert tree.padded >= size
    assert tree.padded < size + tree.block_sizes[1]  # padding below one root child
    assert tree.block_sizes[-1] == 1 and all(f == branching for f in tree.fanouts[1:])


@pytest.mark.parametrize("size, branching", [(13, 2), (13, 3), (16, 4), (30, 4)])
@pytest.mark.parametrize("block_type", BLOCKS)
def test_level_masses_closed_forms_equal_dense(size: int, branching: int, block_type: type) -> None:
    tree = Tree.with_branching(size, branching)
    rows = padded_rows(block_type(size).matrix(), tree)
    for level in range(tree.levels):
        dense = ((rows @ tree_matrix(tree, level).T) ** 2).sum() / tree.block_sizes[level]
        assert tree.block_masses(block_type(size))[level] == pytest.approx(dense, rel=1e-12)


def random_variances(tree: Tree, rng: np.random.Generator, drop: bool) -> np.ndarray:
    variances = rng.uniform(0.5, 4.0, tree.levels)
    if drop:
        variances[rng.choice(tree.levels - 1, size=(tree.levels - 1) // 2, replace=False)] = math.inf
    return variances


@pytest.mark.parametrize("size, branching, drop", [(13, 2, False), (13, 2, True), (20, 3, True), (16, 4, False)])
def test_query_variances_equal_dense_gls(size: int, branching: int, drop: bool) -> None:
    rng = np.random.default_rng(size + branching)
    tree = Tree.with_branching(size, branching)
    variances = random_variances(tree, rng, drop)
    covariance = TreeCovariance(tree, variances)
    dense = dense_covariance(tree, variances)[:size, :size]
    mask = rng.random(size) < 0.5
    mask[0] = True
    mask[-1] = False  # not an interval
    blocks = [AllRange(size), Prefix(size), Identity(size), Total(size), Predicate(mask),
              Predicate(np.arange(size) >= 3), Explicit(rng.normal(size=(3, size)))]
    for block in blocks:
        W = block.matrix()
        assert covariance.variances(block) == pytest.approx(np.einsum("ij,jk,ik->i", W, dense, W), rel=1e-9)
        assert covariance.trace(block) == pytest.approx(np.trace(W @ dense @ W.T), rel=1e-9)


@pytest.mark.parametrize("size, branching, drop", [(13, 2, True), (9, 3, False), (16, 4, True)])
def test_tree_gls_equals_dense_gls(size: int, branching: int, drop: bool) -> None:
    rng = np.random.default_rng(7)
    tree = Tree.with_branching(size, branching)
    variances = random_variances(tree, rng, drop)
    measured = [l for l in range(tree.levels) if np.isfinite(variances[l])]
    values = {l: rng.normal(size=(2, tree.padded // tree.block_sizes[l])) for l in measured}
    S = np.vstack([tree_matrix(tree, l) for l in measured])
    weights = np.concatenate([np.full(tree.padded // tree.block_sizes[l], 1 / variances[l]) for l in measured])
    y = np.hstack([values[l] for l in measured])
    dense = np.linalg.solve(S.T @ (weights[:, None] * S), S.T @ (weights[:, None] * y.T)).T
    assert TreeCovariance(tree, variances).estimate(values) == pytest.approx(dense, abs=1e-10)


def test_recovery_masses_are_the_gls_recovery_norms_per_level() -> None:
    """``a_ℓ = Σ_{i∈ℓ} ‖R_{:,i}‖²`` with ``R = W Σ SᵀD⁻¹`` (docs/math.md §2), computed densely."""
    size, rng = 11, np.random.default_rng(3)
    tree = Tree.with_branching(size, 2)
    variances = rng.uniform(0.5, 3.0, tree.levels)
    W = padded_rows(AllRange(size).matrix(), tree)
    covariance = dense_covariance(tree, variances)
    dense = [((W @ covariance @ tree_matrix(tree, l).T / variances[l]) ** 2).sum() for l in range(tree.levels)]
    masses = tree.block_masses(AllRange(size))
    assert recovery_masses(tree, variances, masses) == pytest.approx(dense, rel=1e-9)
    assert tree_error(tree, variances, masses) == pytest.approx(np.trace(W @ covariance @ W.T), rel=1e-12)


def mixed_workload() -> Workload:
    dom = Domain({"sex": 2, "age": 12, "race": 3}, ordered={"age"})
    mask = np.zeros(12, dtype=bool)
    mask[[1, 4, 5]] = True
    products = (
        Product(dom, (Factor(("sex",), Identity(2)), Factor(("age",), AllRange(12)))),
        Product(dom, (Factor(("race",), Identity(3)), Factor(("age",), Predicate(np.arange(12) < 5))), 2.0),
        Product(dom, (Factor(("age",), Prefix(12)),), 0.5),
        Product(dom, (Factor(("age",), Predicate(mask)), Factor(("sex",), Total(2)))),
        Product(dom, (Factor(("race",), Identity(3)),)),
    )
    return Workload(dom, products)


def dense_candidate_variances(candidate: hierarchy.HierarchyCandidate) -> np.ndarray:
    """Brute force over the full domain: measured marginal cells × padded tree, dense GLS."""
    workload, tree = candidate.workload, candidate.tree
    layout = candidate.layout
    assert layout.measured == workload.domain.attributes and layout.attribute == "age"
    variances = candidate.covariance.level_variances
    covariance = dense_covariance(tree, variances)[: tree.size, : tree.size]
    other = layout.other_cells
    # full-domain covariance in C order (sex, age, race): permute I_other ⊗ Σ_age
    full = np.kron(np.eye(other), covariance).reshape(2, 3, 12, 2, 3, 12)
    full = full.transpose(0, 2, 1, 3, 5, 4).reshape(workload.domain.size, workload.domain.size)
    W = np.vstack([p.matrix_on(workload.domain.attributes) for p in workload.products])
    return np.einsum("ij,jk,ik->i", W, full, W)


@pytest.mark.parametrize("privacy", [Privacy.laplace(0.7), Privacy.zcdp(0.3)])
def test_candidate_variances_on_a_mixed_workload_equal_brute_force(privacy: Privacy) -> None:
    workload = mixed_workload()
    (candidate,) = hierarchy.candidates(workload, privacy, contributions=2)
    expected = dense_candidate_variances(candidate)
    assert np.concatenate(candidate.query_variances()) == pytest.approx(expected, rel=1e-9)
    weights = np.concatenate([np.full(p.rows, p.weight**2) for p in workload.products])
    assert candidate.expected_error() == pytest.approx(weights @ expected, rel=1e-9)
    total = privacy.epsilon if privacy.is_laplace else privacy.rho
    assert sum(g.budget for g in candidate.group_budgets()) == pytest.approx(total, rel=1e-12)


def test_exact_measurement_answers_the_workload_exactly() -> None:
    workload = mixed_workload()
    rng = np.random.default_rng(1)
    data = rng.integers(0, 20, size=workload.domain.shape(workload.domain.attributes))
    (candidate,) = hierarchy.candidates(workload, Privacy.laplace(1.0))
    (measured,) = candidate.required_marginals()
    measurement = candidate.measure({measured: data}, noise=False)
    answers = candidate.answer(measurement)
    for got, want in zip(answers.values, workload.answer({measured: data})):
        assert got == pytest.approx(want, abs=1e-9)


def test_answers_are_consistent_ranges_sum_their_leaves() -> None:
    dom = Domain({"age": 20}, ordered={"age"})
    workload = Workload.all_range(dom, "age") + Workload(dom, (Product(dom, (Factor(("age",), Identity(20)),)),))
    (candidate,) = hierarchy.candidates(workload, Privacy.laplace(1.0))
    data = np.random.default_rng(2).integers(0, 50, size=20)
    ranges, leaves = candidate.answer(candidate.measure({("age",): data}, rng=5)).values
    assert ranges == pytest.approx(AllRange(20).matrix() @ leaves, abs=1e-9)
    assert not np.allclose(leaves, data)  # noise was added


@pytest.mark.parametrize("privacy", [Privacy.laplace(1.0), Privacy.zcdp(0.5)])
def test_empirical_error_matches_the_prediction(privacy: Privacy) -> None:
    """800 independent repetitions within 4 standard errors of the prediction."""
    assert_empirical_error_matches_prediction(hierarchy.candidates, privacy, 10, high=30, data_seed=0, noise_seed=11)


def test_discrete_noise_variances_are_used() -> None:
    dom = Domain({"age": 8}, ordered={"age"})
    (candidate,) = hierarchy.candidates(Workload.prefix(dom, "age"), Privacy.laplace(0.5))
    for group in candidate.group_budgets():
        scale = 1 / group.budget
        assert group.noise_variance == pytest.approx(2 * math.exp(-1 / scale) / (1 - math.exp(-1 / scale)) ** 2, rel=1e-5)


def test_gaussian_budgets_reach_the_published_ratio_for_all_ranges() -> None:
    """Per-level budgets + GLS on all ranges of 1024 cells: 1.48× the SVD bound (Cormode et al. 2013's figure),
    and the budgets satisfy the KKT conditions of the convex zCDP problem (equal ∂E/∂ρ_ℓ)."""
    size = 1024
    dom = Domain({"age": size}, ordered={"age"})
    workload = Workload.all_range(dom, "age")
    (layout,) = range_layouts(workload)
    candidate = hierarchy.hierarchy_candidate(layout, Privacy.zcdp(1.0), 1, 2)
    eigenvalues = (size + 1) / (2 - 2 * np.cos(np.pi * np.arange(1, size + 1) / (size + 1)))
    bound = np.sqrt(eigenvalues).sum() ** 2 / (2 * size)
    assert candidate.expected_error() / bound == pytest.approx(1.48, abs=0.006)
    shares = candidate.budgets
    masses = candidate.tree.block_masses(AllRange(size))
    derivative = recovery_masses(candidate.tree, 1 / (2 * shares), masses) / (2 * shares**2)  # −∂E/∂ρ_ℓ
    assert derivative == pytest.approx(np.full_like(derivative, derivative.mean()), rel=1e-3)


def test_not_offered_without_ranges_on_an_ordered_attribute() -> None:
    dom = Domain({"a": 4, "age": 8}, ordered={"age"})
    assert hierarchy.candidates(Workload.marginals(dom, [("a", "age")]), Privacy.laplace(1.0)) == []
    coupled = Product(dom, (Factor(("a", "age"), Explicit(np.ones((1, 32)))), ))
    ranged = Product(dom, (Factor(("age",), AllRange(8)),))
    assert hierarchy.candidates(Workload(dom, (coupled, ranged)), Privacy.laplace(1.0)) == []


@pytest.mark.parametrize("privacy", [Privacy.laplace(0.8), Privacy.zcdp(0.4)])
def test_a_query_that_is_one_tree_node_keeps_the_tree_gls_well_conditioned(privacy: Privacy) -> None:
    """``b ∈ [4, 5]`` by ``a`` is exactly one node of the binary tree over 10 cells: only that level and the
    leaves are measured. With the leaves at 10⁻⁶ of the budget (the old floor) the tree GLS lost 1e-2 on
    noise-free answers and 1e-3 on stated variances; the leaves now keep 2⁻⁸ and both are exact: the
    node's variance is 2/(2/v_node + 1/v_leaf) (two leaves under it)."""
    dom = Domain({"a": 11, "b": 10}, ordered={"b"})
    mask = np.zeros(10, dtype=bool)
    mask[4:6] = True
    workload = Workload(dom, (Product(dom, (Factor(("a",), Identity(11)), Factor(("b",), Predicate(mask)))),))
    chosen = plan(workload, privacy)
    candidate = chosen.candidate
    assert chosen.strategy_name == "hierarchy(b=2)" and sorted(candidate.noises) == [3, 4]
    leaf_share = candidate.budgets[4] / candidate.budgets.sum()
    assert leaf_share == pytest.approx(hierarchy.PRUNE_SHARE, rel=1e-9)
    node, leaf = candidate.noises[3].variance, candidate.noises[4].variance
    np.testing.assert_allclose(candidate.query_variances()[0], 2 / (2 / node + 1 / leaf), rtol=1e-9)
    data = np.random.default_rng(0).integers(0, 20, size=(11, 10))
    answers = chosen.answer(chosen.measure({("a", "b"): data}, noise=False))
    np.testing.assert_allclose(answers.values[0], data[:, 4:6].sum(axis=1), atol=1e-6)


@pytest.mark.parametrize("size, branching, end, fraction", [(13, 2, 12, 0.3), (20, 3, 17, 0.5), (16, 4, 0, 0.99)])
def test_a_quantile_rank_block_is_priced_from_interval_variances(size: int, branching: int, end: int, fraction: float) -> None:
    """``F(k) − q·F(end)`` is priced without its dense rows (three interval variances per row), equal to
    ``r Σ rᵀ`` of the dense rows: what lets 99 quantiles over 10⁵ cells be priced in O(n) each."""
    rng = np.random.default_rng(size)
    tree = Tree.with_branching(size, branching)
    variances = random_variances(tree, rng, True)
    covariance = TreeCovariance(tree, variances)
    dense = dense_covariance(tree, variances)[:size, :size]
    block = ShiftedPrefix(size, fraction, end)
    W = block.matrix()
    assert block_variances(covariance, block) == pytest.approx(np.einsum("ij,jk,ik->i", W, dense, W), rel=1e-9)
    tensor = rng.normal(size=(2, size, 3))
    assert block.apply(tensor, 1) == pytest.approx(np.einsum("ij,ajb->aib", W, tensor))


def test_a_hundred_where_ranges_over_a_million_cells_are_priced_from_their_ends() -> None:
    """100 ``WHERE v BETWEEN a AND b`` by a two-valued ``g`` over 10⁶ ordered cells: each range is priced from
    its two ends, ``O(levels)`` per tree, never ``O(cells)`` (each WHERE was rescanned as 10⁶ Python booleans
    per level and per tree: 3 such ranges took 30 s, 100 did not plan in 15 minutes). The expected error,
    from level masses, is twice the sum of the per-range variances (``‖I_g‖² = 2``), and noise-free answers
    are the exact counts."""
    n = 10**6
    dom = Domain({"g": 2, "v": n}, ordered={"v"})
    ends = np.sort(np.random.default_rng(3).integers(0, n, size=(100, 2)), axis=1)
    cells = np.arange(n)
    workload = Workload(dom, tuple(
        Product(dom, (Factor(("g",), Identity(2)), Factor(("v",), Predicate((cells >= low) & (cells <= high)))))
        for low, high in ends
    ))
    chosen = plan(workload, Privacy.zcdp(0.5))
    assert chosen.strategy_name.startswith("hierarchy")
    variances = chosen.query_variances()
    assert all(v.shape == (2,) and v[0] == v[1] for v in variances)
    assert chosen.expected_error() == pytest.approx(2 * sum(float(v[0]) for v in variances), rel=1e-9)
    data = np.random.default_rng(4).integers(0, 3, size=(2, n))
    answers = chosen.answer(chosen.measure({("g", "v"): data}, noise=False))
    exact = [data[:, low : high + 1].sum(axis=1) for low, high in ends]
    np.testing.assert_allclose(np.concatenate(answers.values), np.concatenate(exact), atol=1e-6)
