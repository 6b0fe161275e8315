"""Every candidate's closed-form error, variances and privacy against brute-force dense computation.

For random workloads over at most 3 attributes of size at most 6 (identity, prefix, range, predicate
and explicit blocks, random weights), each candidate's ``dense_strategy()`` gives the measured integer
rows ``S`` (over the padded domain for bit-encoded Fourier) and each row's exact noise variance; GLS error must equal ``tr(W (SᵀΣ⁻¹S)⁺ Wᵀ)``, every query
variance the matching diagonal, and the per-column privacy cost must not exceed the budget.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner import AllRange, Domain, Explicit, Factor, Identity, Predicate, Prefix, Privacy, Product, Workload, plan
from planner.budget import grouped_error, laplace_budgets, gaussian_budgets, optimal_row_budgets_cvx
from planner.select import all_candidates, singular_value_sum
from planner.strategies.residual import CoefficientCandidate


def random_block(rng: np.random.Generator, size: int, ordered: bool):
    kinds = ["identity", "predicate", "explicit"] + (["prefix", "range"] if ordered else [])
    kind = kinds[rng.integers(len(kinds))]
    if kind == "identity":
        return Identity(size)
    if kind == "prefix":
        return Prefix(size)
    if kind == "range":
        return AllRange(size)
    if kind == "predicate":
        mask = rng.integers(0, 2, size).astype(bool)
        mask[rng.integers(size)] = True
        return Predicate(mask)
    return Explicit(rng.integers(-2, 3, size=(rng.integers(1, 4), size)))


def random_workload(seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    count = int(rng.integers(1, 4))
    names = ["a", "b", "c"][:count]
    sizes = {n: int(rng.integers(2, 7)) for n in names}
    dom = Domain(sizes, ordered=[n for n in names if rng.random() < 0.5])
    products = []
    for _ in range(int(rng.integers(1, 4))):
        chosen = [n for n in names if rng.random() < 0.6]
        factors = tuple(Factor((n,), random_block(rng, sizes[n], dom.is_ordered(n))) for n in chosen)
        products.append(Product(dom, factors, float(rng.choice([1.0, 0.5, 2.0]))))
    return Workload(dom, tuple(products))


def dense_gls(S: np.ndarray, variances: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Covariance of the GLS answers W x̂."""
    information = S.T @ (S / variances[:, None])
    inverse = np.linalg.pinv(information, rcond=1e-10, hermitian=True)
    return W @ inverse @ W.T


CASES = [(seed, privacy) for seed in range(14) for privacy in (Privacy.laplace(0.7), Privacy.zcdp(0.4))]


@pytest.mark.parametrize("seed,privacy", CASES)
def test_candidates_match_dense_gls(seed: int, privacy: Privacy) -> None:
    workload = random_workload(seed)
    contributions = 1 + seed % 2
    candidates = [c for c in all_candidates(workload, privacy, contributions, include_inconsistent=True) if isinstance(c, CoefficientCandidate)]
    assert candidates
    weights = np.concatenate([np.full(p.rows, p.weight) for p in workload.products])
    for candidate in candidates:
        S, parameters, variances = candidate.dense_strategy()
        W = candidate.dense_workload()
        assert np.array_equal(S, np.round(S)), "strategy rows must be integers"
        # every workload row lies in the row space of S
        projector = np.linalg.pinv(S) @ S
        np.testing.assert_allclose(W @ projector, W, atol=1e-8)
        covariance = dense_gls(S, variances, W)
        want = np.diag(covariance)
        got = np.concatenate(candidate.query_variances())
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)
        assert candidate.expected_error() == pytest.approx(float(weights**2 @ want), rel=1e-7)
        # privacy: worst column cost within the budget, and (marginal-type strategies) using all of it
        k = contributions
        if privacy.is_laplace:
            cost = (np.abs(S) * (k / parameters)[:, None]).sum(axis=0).max()
            assert cost <= privacy.epsilon * (1 + 1e-9)
            assert cost == pytest.approx(privacy.epsilon, rel=1e-6)
        else:
            cost = (S**2 * (k**2 / (2 * parameters))[:, None]).sum(axis=0).max()
            assert cost <= privacy.rho * (1 + 1e-9)
            assert cost == pytest.approx(privacy.rho, rel=1e-6)


@pytest.mark.parametrize("seed", range(14))
def test_singular_value_sum_matches_dense_svd(seed: int) -> None:
    workload = random_workload(seed)
    want = np.linalg.svd(workload.dense(), compute_uv=False).sum()
    assert singular_value_sum(workload) == pytest.approx(want, rel=1e-9)


def test_singular_values_of_marginal_unions_by_subset_formula() -> None:
    dom = Domain({"a": 3, "b": 4, "c": 2, "d": 5})
    workload = Workload.all_kway(dom, 2) + 3.0 * Workload.marginals(dom, [("a", "b", "c"), ()])
    want = np.linalg.svd(workload.dense(), compute_uv=False).sum()
    assert singular_value_sum(workload) == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize("privacy", [Privacy.laplace(1.0), Privacy.zcdp(1.0)])
def test_closed_form_budgets_equal_the_convex_program(privacy: Privacy) -> None:
    """Figure 1's own marginals answered directly (R = I): the closed form is the cvxpy optimum."""
    S = Workload.marginals(Domain({"A": 2, "B": 2, "C": 2}), [("A",), ("B", "C")]).dense()
    row_masses = np.ones(6)
    rows = optimal_row_budgets_cvx(S, row_masses, privacy)
    if privacy.is_laplace:
        closed = laplace_budgets([2, 4], [1, 1], 1.0)
        np.testing.assert_allclose(rows, np.repeat(closed, [2, 4]), rtol=1e-3)
        assert grouped_error(row_masses, np.ones(6), rows, privacy) == pytest.approx(46.17, abs=0.01)
    else:
        closed = gaussian_budgets([2, 4], [1, 1], 1.0)
        np.testing.assert_allclose(rows, np.repeat(closed, [2, 4]), rtol=1e-3)
        assert grouped_error(row_masses, np.ones(6), rows, privacy) == pytest.approx((np.sqrt(2) + 2) ** 2 / 2, rel=1e-4)


def test_residual_strategy_error_formula() -> None:
    """Marginal A's total error is Σ_{T⊆A} dim(T) σ_T² Π_{a∈A∖T} 1/n_a (continuous noise)."""
    dom = Domain({"a": 3, "b": 5})
    workload = Workload.marginals(dom, [("a", "b")])
    candidate = next(c for c in all_candidates(workload, Privacy.zcdp(1.0)) if c.name == "residual")
    sigma2 = {t: v.flat[0] for t, v in candidate.coefficient_variances(continuous=True).items()}
    dims = {(): 1, ("a",): 2, ("b",): 4, ("a", "b"): 8}
    want = sum(
        dims[t] * sigma2[t] / np.prod([dom.size_of(x) for x in ("a", "b") if x not in t]) for t in dims
    )
    assert candidate.expected_error(continuous=True) == pytest.approx(want)
    assert set(itertools.chain.from_iterable(dims)) == {"a", "b"}


@pytest.mark.parametrize("privacy", [Privacy.laplace(1.0), Privacy.zcdp(1.0)])
def test_coupled_predicate_factors_match_dense_gls(privacy: Privacy) -> None:
    """A factor over two attributes (``a = 1 OR b = 2``-style predicates) next to an ordinary marginal."""
    dom = Domain({"a": 3, "b": 4, "c": 2})
    rng = np.random.default_rng(0)
    coupled = Factor(("a", "b"), Explicit(rng.integers(0, 2, size=(3, 12))))
    workload = Workload(dom, (Product(dom, (coupled, Factor(("c",), Identity(2)))),)) + Workload.marginals(dom, [("b",)])
    assert singular_value_sum(workload) == pytest.approx(np.linalg.svd(workload.dense(), compute_uv=False).sum())
    for candidate in all_candidates(workload, privacy, include_inconsistent=True):
        if isinstance(candidate, CoefficientCandidate):
            S, _, variances = candidate.dense_strategy()
            want = np.diag(dense_gls(S, variances, candidate.dense_workload()))
            np.testing.assert_allclose(np.concatenate(candidate.query_variances()), want, rtol=1e-9)


@pytest.mark.parametrize("privacy", [Privacy.laplace(1.0), Privacy.zcdp(1.0)])
def test_products_of_the_same_shape_are_recovered_together_like_dense_gls(privacy: Privacy) -> None:
    """Products sharing blocks and bases (several 2-way marginals of equal sizes, one predicate on two
    attributes, prefixes with two weights) are batched by the marginal-type strategies: every query
    variance still equals dense GLS, noise-free answers are exact, the bound is the dense SVD's."""
    dom = Domain({"a": 2, "b": 3, "c": 3, "d": 4}, ordered={"d"})
    mask = [True, False, True]
    predicate = [Product(dom, (Factor((x,), Predicate(mask)), Factor(("d",), Identity(4)))) for x in ("b", "c")]
    prefixes = [Product(dom, (Factor((x,), Identity(3)), Factor(("d",), Prefix(4))), w) for x, w in (("b", 2.0), ("c", 0.5))]
    workload = Workload.all_kway(dom, 2) + Workload(dom, tuple(predicate + prefixes))
    assert singular_value_sum(workload) == pytest.approx(np.linalg.svd(workload.dense(), compute_uv=False).sum(), rel=1e-9)
    data = np.random.default_rng(5).integers(0, 9, size=dom.sizes)
    exact = workload.answer({dom.attributes: data})
    checked = 0
    for candidate in all_candidates(workload, privacy, include_inconsistent=True):
        if not isinstance(candidate, CoefficientCandidate):
            continue
        S, _, variances = candidate.dense_strategy()
        want = np.diag(dense_gls(S, variances, candidate.dense_workload()))
        np.testing.assert_allclose(np.concatenate(candidate.query_variances()), want, rtol=1e-9)
        if candidate.consistent:
            feeds = {m: data.sum(axis=tuple(i for i, a in enumerate(dom.attributes) if a not in m))
                     for m in candidate.required_marginals()}
            answers = candidate.answer(candidate.measure(feeds, noise=False)).values
            for got, expected in zip(answers, exact):
                np.testing.assert_allclose(got, expected, atol=1e-8)
        checked += 1
    assert checked >= 3


def test_singular_values_of_commuting_blocks_with_degenerate_sums() -> None:
    """Two query blocks on one attribute share eigenvectors, and their plain sum has a repeated
    eigenvalue: the common eigenbasis must come from a generic combination, not the sum."""
    q, _ = np.linalg.qr(np.random.default_rng(3).normal(size=(4, 4)))
    first = Explicit(np.diag(np.sqrt([1.0, 4.0, 9.0, 2.0])) @ q.T)
    second = Explicit(np.diag(np.sqrt([9.0, 4.0, 1.0, 5.0])) @ q.T)  # Grams sum to 10, 8, 10, 7
    dom = Domain({"a": 4, "b": 3})
    workload = Workload(
        dom,
        (
            Product(dom, (Factor(("a",), first), Factor(("b",), Identity(3)))),
            Product(dom, (Factor(("a",), second), Factor(("b",), Identity(3))), 2.0),
        ),
    )
    assert singular_value_sum(workload) == pytest.approx(np.linalg.svd(workload.dense(), compute_uv=False).sum(), rel=1e-9)


def _non_commuting_workloads() -> list[Workload]:
    """Ranges on an attribute that another product sums out: no common eigenbasis per attribute."""
    dom = Domain({"a": 3, "t": 9, "u": 7, "s": 2}, ordered={"t", "u"})
    coupled = Factor(("s", "a"), Explicit(np.random.default_rng(5).integers(0, 2, size=(4, 6))))
    return [
        Workload.prefix(dom, "t") + Workload.marginals(dom, [("a",)]),
        Workload.all_range(dom, "t") + 2.0 * Workload.all_range(dom, "u") + Workload.marginals(dom, [("s",), ("a", "s")]),
        Workload(dom, (Product(dom, (Factor(("t",), AllRange(9)), Factor(("s",), Identity(2)))),))
        + Workload.prefix(dom, "t", weight=0.5)
        + Workload.marginals(dom, [("a", "u")]),
        Workload(dom, (Product(dom, (coupled, Factor(("t",), Prefix(9)))),)) + Workload.all_range(dom, "u"),
    ]


@pytest.mark.parametrize("index", range(4))
def test_singular_value_sum_in_the_marginal_space_matches_dense_svd(index: int) -> None:
    workload = _non_commuting_workloads()[index]
    want = np.linalg.svd(workload.dense(), compute_uv=False).sum()
    assert singular_value_sum(workload) == pytest.approx(want, rel=1e-9)


def test_partly_structured_and_marginal_space_bounds_agree() -> None:
    """Ranges on t beside three 2-way marginals: t is dense, a, b, c diagonalised (127 marginal cells,
    so the marginal-space computation is also possible)."""
    from planner.select import _marginal_space_singular_value_sum, _partly_structured_singular_value_sum

    dom = Domain({"t": 20, "a": 5, "b": 6, "c": 7}, ordered={"t"})
    workload = Workload.all_range(dom, "t") + Workload.marginals(dom, [("a", "b"), ("b", "c"), ("a", "c")], weight=3.0)
    partly = _partly_structured_singular_value_sum(workload)
    assert partly == pytest.approx(_marginal_space_singular_value_sum(workload), rel=1e-9)
    assert singular_value_sum(workload) == partly


def test_bound_for_ranges_beside_all_two_way_marginals_of_a_large_domain() -> None:
    """Age ranges beside the 28 two-way marginals of the Adult attributes (134 M cells): the bound needs
    the partly structured computation; the zCDP plan (a composite) is within 2 % of it."""
    sizes = {"workclass": 9, "education": 16, "marital": 7, "occupation": 15, "relationship": 6, "race": 5, "sex": 2, "income": 2}
    dom = Domain({"age": 74, **sizes}, ordered={"age"})
    workload = Workload.all_range(dom, "age") + Workload.marginals(dom, itertools.combinations(sizes, 2))
    chosen = plan(workload, Privacy.zcdp(1.0))
    assert 1.0 <= chosen.ratio <= 1.02
