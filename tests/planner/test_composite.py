"""Composite strategies: parts, budget split, the link to the total against dense covariances, every
answer's variance against dense brute-force GLS over the stacked parts, exact agreement of the parts'
totals, noise-free and empirical checks, and when the planner chooses it."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from planner import (
    AllRange,
    Domain,
    Explicit,
    Factor,
    Identity,
    Prefix,
    Privacy,
    Product,
    Workload,
    plan,
)
from planner.select import all_candidates, candidates_or_empty, choose, svd_bound
from planner.strategies import (
    composite,
    eigen,
    fourier,
    hats,
    hierarchy,
    identity,
    kronecker,
    marginals,
    pidentity,
    residual,
    ridge,
)
from planner.strategies.base import Candidate
from planner.strategies.composite import (
    CompositeCandidate,
    Part,
    parts_of,
    split_budget,
    total_link,
)
from planner.strategies.ranges import OrderedCovariance, RangeCandidate
from planner.strategies.residual import CoefficientCandidate

DOM = Domain({"x": 32, "y": 4, "s": 2}, ordered={"x", "y"})  # x large enough for range families under ε-DP
ZCDP, LAPLACE = Privacy.zcdp(0.7), Privacy.laplace(0.9)


def composite_candidates(workload: Workload, privacy: Privacy, contributions: int) -> list[Candidate]:
    """The composite family as the planner's search calls it."""
    return composite.candidates(workload, privacy, contributions, False, candidates_or_empty)


def product(*factors: tuple[str, object], weight: float = 1.0, dom: Domain = DOM) -> Workload:
    return Workload(dom, (Product(dom, tuple(Factor((a,), b) for a, b in factors), weight),))


# --------------------------------------------------------------------------------------------------
# Parts and budgets.
# --------------------------------------------------------------------------------------------------


def test_parts_are_connected_components_and_totals_join_the_largest() -> None:
    workload = (
        Workload.prefix(DOM, "x")
        + Workload.marginals(DOM, [("s",), ()])
        + product(("y", AllRange(4)), ("s", Identity(2)))
        + Workload.all_range(DOM, "x")
    )
    # products: 0 prefix x (32 rows), 1 s, 2 total, 3 ranges y by s (20 rows), 4 all ranges x (528 rows)
    assert parts_of(workload) == [(0, 2, 4), (1, 3)]  # the x part has 561 queries, the (y, s) part 22
    assert parts_of(Workload.marginals(DOM, [("x", "y"), ("y", "s")])) == [(0, 1)]
    assert parts_of(Workload.marginals(DOM, [(), ()])) == [(0, 1)]


def test_offered_only_for_two_or_more_parts_with_a_range_part_and_never_for_a_part() -> None:
    assert composite_candidates(Workload.marginals(DOM, [("x", "y"), ("y", "s")]), ZCDP, 1) == []
    for privacy in (ZCDP, LAPLACE):  # every part marginal-type: the joint marginal families cover it
        assert composite_candidates(Workload.marginals(DOM, [("x",), ("y", "s")]), privacy, 1) == []
    workload = Workload.prefix(DOM, "x") + Workload.marginals(DOM, [("y", "s")])
    (candidate,) = composite_candidates(workload, ZCDP, 1)
    for part in candidate.parts:
        assert not any(isinstance(c, CompositeCandidate) for c in all_candidates(part.candidate.workload, ZCDP))


@pytest.mark.parametrize("privacy,power", [(Privacy.zcdp(0.3), 1 / 2), (Privacy.laplace(0.3), 1 / 3)])
def test_budget_split_is_the_closed_form_and_never_exceeds_the_spec(privacy: Privacy, power: float) -> None:
    errors = [1.0, 7.0, 3.0, 1e-3, 0.1]
    shares = split_budget(privacy, errors)
    amounts = [s.epsilon if privacy.is_laplace else s.rho for s in shares]
    assert all(s.family == privacy.family for s in shares)
    assert math.fsum(amounts) <= 0.3
    assert math.fsum(amounts) == pytest.approx(0.3, rel=1e-15)
    weights = np.array(errors) ** power
    np.testing.assert_allclose(amounts, 0.3 * weights / weights.sum(), rtol=1e-14)
    # the closed form is optimal: moving budget between two parts only increases Σ E_i/ρ_i or Σ E_i/ε_i²
    exponent = round(1 / power) - 1
    total = sum(e / a**exponent for e, a in zip(errors, amounts))
    for delta in (1e-4, -1e-4):
        moved = [amounts[0] + delta, amounts[1] - delta] + amounts[2:]
        assert sum(e / a**exponent for e, a in zip(errors, moved)) > total


# --------------------------------------------------------------------------------------------------
# Dense references.
# --------------------------------------------------------------------------------------------------


def dense_ordered_covariance(covariance: OrderedCovariance) -> np.ndarray:
    """``Σ_t`` densely by polarisation of the variances of the rows ``e_j + e_k``."""
    n = covariance.size
    pairs = np.array([(j, k) for j in range(n) for k in range(j, n)])
    rows = np.zeros((len(pairs), n))
    np.add.at(rows, (np.arange(len(pairs)), pairs[:, 0]), 1.0)
    np.add.at(rows, (np.arange(len(pairs)), pairs[:, 1]), 1.0)
    single = covariance.variances(Identity(n))
    summed = covariance.variances(Explicit(rows))
    sigma = np.zeros((n, n))
    sigma[pairs[:, 0], pairs[:, 1]] = (summed - single[pairs[:, 0]] - single[pairs[:, 1]]) / 2
    return np.triu(sigma) + np.triu(sigma, 1).T


def dense_precision(candidate: Candidate) -> np.ndarray:
    """Information ``Σ SᵀV⁻¹S`` of one part over the full domain: its dense strategy for marginal-type
    candidates, ``Mᵀ(I ⊗ Σ_t)⁻¹M`` (``M`` = the measured marginal) for range candidates."""
    dom = candidate.workload.domain
    if isinstance(candidate, CoefficientCandidate):
        strategy, _, variances = candidate.dense_strategy()
        return strategy.T @ (strategy / variances[:, None])
    if isinstance(candidate, kronecker.KroneckerCandidate):
        factors = candidate.factors
        sigma = candidate.noise.variance * functools.reduce(np.kron, [
            factors[a].covariance.matrix() if a in factors else np.eye(dom.size_of(a)) for a in candidate.layout.measured
        ], np.ones((1, 1)))
        summing = Workload.marginals(dom, [candidate.layout.measured]).dense()
        return summing.T @ np.linalg.solve(sigma, summing)
    assert isinstance(candidate, RangeCandidate)
    layout = candidate.layout
    sigma_t = dense_ordered_covariance(candidate.covariance)
    sigma = functools.reduce(
        np.kron, [sigma_t if a == layout.attribute else np.eye(dom.size_of(a)) for a in layout.measured], np.ones((1, 1))
    )
    summing = Workload.marginals(dom, [layout.measured]).dense()
    return summing.T @ np.linalg.solve(sigma, summing)


def unweighted_dense(workload: Workload) -> np.ndarray:
    return np.vstack([p.matrix_on(workload.domain.attributes) for p in workload.products])


def assert_matches_dense_gls(candidate: CompositeCandidate) -> None:
    information = sum(dense_precision(part.candidate) for part in candidate.parts)
    W = unweighted_dense(candidate.workload)
    covariance = W @ np.linalg.pinv(information, rcond=1e-12, hermitian=True) @ W.T
    want = np.diag(covariance)
    np.testing.assert_allclose(np.concatenate(candidate.query_variances()), want, rtol=1e-7)
    weights = np.concatenate([np.full(p.rows, p.weight) for p in candidate.workload.products])
    assert candidate.expected_error() == pytest.approx(float(weights**2 @ want), rel=1e-7)
    # and the parts alone (no total correction) are worse on every query that covaries with a total
    separate = np.concatenate([v for part in candidate.parts for v in part.candidate.query_variances()])
    assert np.concatenate(candidate.query_variances()).sum() < separate.sum()


# --------------------------------------------------------------------------------------------------
# The link to the total.
# --------------------------------------------------------------------------------------------------

COEFFICIENT_FAMILIES = [identity.candidates, marginals.candidates, fourier.candidates, residual.candidates]


@pytest.mark.parametrize("privacy", [ZCDP, LAPLACE], ids=["zcdp", "laplace"])
def test_coefficient_candidates_covary_with_their_total_uniformly(privacy: Privacy) -> None:
    """``Cov(x̂, T) = (s/N)·1`` on the part's marginal, from the dense GLS covariance."""
    workload = Workload.marginals(DOM, [("y", "s"), ("y",)], weight=1.5) + product(("s", Explicit([[2.0, -1.0]])))
    found = [c for family in COEFFICIENT_FAMILIES for c in family(workload, privacy, 2) if isinstance(c, CoefficientCandidate)]
    assert len(found) >= 3
    summing = Workload.marginals(DOM, [("y", "s")]).dense()
    for candidate in found:
        link = total_link(candidate)
        assert link is not None and link.attributes == ("y", "s")
        covariance = np.linalg.pinv(dense_precision(candidate), rcond=1e-12, hermitian=True)
        want = summing @ covariance @ np.ones(DOM.size)
        np.testing.assert_allclose(link.covariance.ravel(), want, rtol=1e-8)
        assert link.total_variance == pytest.approx(float(np.ones(DOM.size) @ covariance @ np.ones(DOM.size)), rel=1e-8)
        assert np.ptp(want) < 1e-9 * want.max()  # uniform


RANGE_FAMILIES = [
    (hierarchy.candidates, ZCDP),
    (hierarchy.candidates, LAPLACE),
    (eigen.candidates, ZCDP),
    (hats.candidates, LAPLACE),
    (pidentity.candidates, LAPLACE),
    (ridge.candidates, LAPLACE),
]


@pytest.mark.parametrize("family,privacy", RANGE_FAMILIES, ids=lambda v: getattr(v, "__module__", str(v)))
def test_range_candidates_covary_with_their_total_by_the_row_sums_of_sigma(family, privacy: Privacy) -> None:
    n = 16 if family in (pidentity.candidates, ridge.candidates) else 7  # p-identity from 16 cells; 7: padded trees
    dom = Domain({"x": n, "y": 4, "s": 2}, ordered={"x", "y"})
    workload = product(("x", AllRange(n)), ("s", Identity(2)), dom=dom) + product(("x", Prefix(n)), dom=dom)
    (candidate,) = family(workload, privacy, 1)
    link = total_link(candidate)
    assert link is not None and link.attributes == ("x", "s")
    sigma_t = dense_ordered_covariance(candidate.covariance)
    np.testing.assert_allclose(link.covariance[..., 0], np.repeat(sigma_t.sum(axis=1)[:, None], 2, axis=1), rtol=1e-9)
    assert link.total_variance == pytest.approx(2 * sigma_t.sum(), rel=1e-9)


@pytest.mark.parametrize("privacy", [ZCDP, LAPLACE], ids=["zcdp", "laplace"])
def test_a_kronecker_part_covaries_with_its_total_by_its_factors_and_matches_dense_gls(privacy: Privacy) -> None:
    """2-D ranges over (x, y) beside ranges on z: the (x, y) part is a Kronecker strategy, whose link is
    ``v ⊗_a C_a1``; the composite's variances equal the dense GLS over the stacked parts."""
    dom = Domain({"x": 8, "y": 4, "z": 16}, ordered={"x", "y", "z"})
    workload = product(("x", AllRange(8)), ("y", AllRange(4)), dom=dom) + Workload.all_range(dom, "z")
    ranges = Workload(dom, workload.products[:1])
    (offered,) = [c for c in all_candidates(ranges, privacy) if isinstance(c, kronecker.KroneckerCandidate)]
    link = total_link(offered)
    sigma = offered.noise.variance * np.kron(*(offered.factors[a].covariance.matrix() for a in ("x", "y")))
    np.testing.assert_allclose(link.covariance.ravel(), sigma.sum(axis=1), rtol=1e-9)
    z_part = Workload(dom, workload.products[1:])
    shares = composite.split_budget(privacy, [offered.expected_error(), choose(all_candidates(z_part, privacy)).expected_error()])
    (kron,) = kronecker.candidates(ranges, shares[0])
    other = choose(all_candidates(z_part, shares[1]))
    parts = [composite.Part((0,), kron, total_link(kron)), composite.Part((1,), other, total_link(other))]
    assert_matches_dense_gls(composite.CompositeCandidate(workload, privacy, parts))
    if not privacy.is_laplace:  # under ε-DP the joint marginals win on 8 × 4 cells
        (planned,) = composite_candidates(workload, privacy, 1)
        assert isinstance(planned.parts[0].candidate, kronecker.KroneckerCandidate)


# --------------------------------------------------------------------------------------------------
# Exact variances against dense GLS over the stacked parts.
# --------------------------------------------------------------------------------------------------

WORKLOADS = {
    "prefix x + marginal (y, s)": Workload.prefix(DOM, "x") + Workload.marginals(DOM, [("y", "s")]),
    "ranges x + ranges y + s + total": Workload.all_range(DOM, "x")
    + Workload.all_range(DOM, "y", weight=0.5)
    + Workload.marginals(DOM, [("s",), ()], weight=2.0),
    "ranges y by s + ranges x + x": product(("y", AllRange(4)), ("s", Identity(2)), weight=3.0)
    + Workload.all_range(DOM, "x", weight=0.5)
    + Workload.marginals(DOM, [("x",)]),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
@pytest.mark.parametrize("privacy", [ZCDP, LAPLACE], ids=["zcdp", "laplace"])
def test_planned_composite_matches_dense_gls(name: str, privacy: Privacy) -> None:
    workload = WORKLOADS[name]
    (candidate,) = composite_candidates(workload, privacy, 2)
    assert len(candidate.parts) == len(parts_of(workload))
    assert_matches_dense_gls(candidate)


PAIRS = [
    (family, privacy, other)
    for family, privacy in RANGE_FAMILIES
    for other in COEFFICIENT_FAMILIES
    if not (other is residual.candidates and privacy.is_laplace)  # the residual strategy is zCDP only
]


@pytest.mark.parametrize("family,privacy,other", PAIRS, ids=lambda v: getattr(v, "__module__", str(v)).rsplit(".", 1)[-1])
def test_every_range_family_beside_every_marginal_family_matches_dense_gls(family, privacy: Privacy, other) -> None:
    n = 16 if family in (pidentity.candidates, ridge.candidates) else 8
    dom = Domain({"x": n, "y": 4, "s": 2}, ordered={"x", "y"})  # Fourier's dense strategy pads x
    ranges_part = product(("x", AllRange(n)), dom=dom) + Workload.marginals(dom, [()])
    marginal_part = Workload.marginals(dom, [("y", "s"), ("s",)])
    workload = ranges_part + marginal_part
    shares = (privacy.scaled(0.625), privacy.scaled(0.375))
    first = family(ranges_part, shares[0], 1)
    second = other(marginal_part, shares[1], 1)
    parts = [Part((0, 1), first[0], total_link(first[0])), Part((2, 3), second[0], total_link(second[0]))]
    assert_matches_dense_gls(CompositeCandidate(workload, privacy, parts))


@pytest.mark.parametrize("privacy", [ZCDP, LAPLACE], ids=["zcdp", "laplace"])
def test_two_marginal_parts_match_dense_gls(privacy: Privacy) -> None:
    workload = Workload.marginals(DOM, [("x",)], weight=3.0) + Workload.marginals(DOM, [("y", "s"), ("s",), ()])
    parts = []
    for products, family, share in [((0,), fourier.candidates, 0.3), ((1, 2, 3), marginals.candidates, 0.7)]:
        candidate = family(Workload(DOM, tuple(workload.products[i] for i in products)), privacy.scaled(share), 1)[0]
        parts.append(Part(products, candidate, total_link(candidate)))
    assert_matches_dense_gls(CompositeCandidate(workload, privacy, parts))


def test_two_range_parts_and_a_padded_tree_match_dense_gls() -> None:
    dom = Domain({"x": 6, "y": 5, "s": 2}, ordered={"x", "y"})
    workload = Workload.all_range(dom, "x") + product(("y", Prefix(5)), ("s", Identity(2)), dom=dom)
    parts = []
    for products, family, share in [((0,), hierarchy.candidates, 0.25), ((1,), eigen.candidates, 0.75)]:
        (candidate,) = family(Workload(dom, tuple(workload.products[i] for i in products)), ZCDP.scaled(share), 1)
        parts.append(Part(products, candidate, total_link(candidate)))
    assert_matches_dense_gls(CompositeCandidate(workload, ZCDP, parts))


# --------------------------------------------------------------------------------------------------
# Answers: totals agree, noise-free answers exact, empirical variances, the contract.
# --------------------------------------------------------------------------------------------------


def random_data(dom: Domain, seed: int = 3) -> dict[tuple[str, ...], np.ndarray]:
    return {dom.attributes: np.random.default_rng(seed).integers(0, 20, size=dom.shape(dom.attributes))}


@pytest.mark.parametrize("privacy", [ZCDP, LAPLACE], ids=["zcdp", "laplace"])
def test_totals_of_every_part_agree_exactly(privacy: Privacy) -> None:
    workload = Workload.prefix(DOM, "x") + Workload.all_range(DOM, "y") + Workload.marginals(DOM, [("s",)])
    (candidate,) = composite_candidates(workload, privacy, 1)
    measurement = candidate.measure(random_data(DOM), rng=12)
    answers = candidate.answer(measurement)
    prefix_total, range_total, cells = answers.values[0][-1], answers.values[1][3], answers.values[2]  # range [0, 3]
    raw = [composite.answers_and_shared(p.candidate, candidate._part_measurement(i, measurement), ())[1][0] for i, p in enumerate(candidate.parts)]
    variances = [p.link.total_variance for p in candidate.parts]
    assert len(set(np.round(raw, 6))) == 3  # the parts' own totals differ (noise) …
    grand = sum(t / s for t, s in zip(raw, variances)) / sum(1 / s for s in variances)
    for total in (prefix_total, range_total, cells.sum()):  # … and all become the GLS total
        assert total == pytest.approx(grand, rel=1e-12, abs=1e-9)
    # the total's variance is 1/S on every part
    expected = 1 / sum(1 / s for s in variances)
    assert candidate.query_variances()[0][-1] == pytest.approx(expected, rel=1e-9)
    assert candidate.query_variances()[1][3] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("privacy", [ZCDP, LAPLACE], ids=["zcdp", "laplace"])
def test_noise_free_answers_are_exact_and_the_contract_holds(privacy: Privacy) -> None:
    workload = WORKLOADS["ranges x + ranges y + s + total"]
    (candidate,) = composite_candidates(workload, privacy, 1)
    data = random_data(DOM)
    measurement = candidate.measure(data, noise=False)
    for got, want in zip(candidate.answer(measurement).values, workload.answer(data)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)
    assert measurement.privacy == privacy and measurement.strategy == candidate.name
    assert all(key.startswith("part ") for key in measurement.values)
    groups = candidate.group_budgets()
    amount = privacy.epsilon if privacy.is_laplace else privacy.rho
    assert math.fsum(g.budget for g in groups) <= amount
    assert math.fsum(g.budget for g in groups) == pytest.approx(amount, rel=1e-12)
    assert {g.name.split(":")[0] for g in groups} == {f"part {i}" for i in range(len(candidate.parts))}
    assert set(candidate.required_marginals()) == {m for p in candidate.parts for m in p.candidate.required_marginals()}
    assert [v.shape for v in candidate.query_variances()] == [(p.rows,) for p in workload.products]
    with pytest.raises(ValueError, match="made by"):
        candidate.answer(candidate.parts[0].candidate.measure(data, noise=False))


def test_empirical_error_matches_the_prediction() -> None:
    """600 independent releases (one seeded stream): the mean total squared error lies within 4
    standard errors of the expected error."""
    workload = Workload.prefix(DOM, "x") + Workload.marginals(DOM, [("y", "s")])
    (candidate,) = composite_candidates(workload, Privacy.zcdp(2.0), 1)
    data = random_data(DOM)
    truth = np.concatenate(workload.answer(data))
    rng = np.random.default_rng(5)
    errors = np.array(
        [((np.concatenate(candidate.answer(candidate.measure(data, rng=rng)).values) - truth) ** 2).sum() for _ in range(600)]
    )
    assert abs(errors.mean() - candidate.expected_error()) < 4 * errors.std(ddof=1) / math.sqrt(errors.size)


def test_the_parts_draw_independent_noise_from_one_seed() -> None:
    workload = Workload.prefix(DOM, "x") + Workload.prefix(DOM, "y")
    (candidate,) = composite_candidates(workload, ZCDP, 1)
    data = random_data(DOM)
    exact = candidate.measure(data, noise=False)
    noisy = candidate.measure(data, rng=4)
    drawn = [np.concatenate([np.ravel(noisy.values[k] - exact.values[k]) for k in exact.values if k.startswith(f"part {i}")]) for i in range(2)]
    assert not np.array_equal(drawn[0], drawn[1][: drawn[0].size])


# --------------------------------------------------------------------------------------------------
# The planner's choice.
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [64])
def test_the_planner_chooses_it_for_disjoint_parts(size: int) -> None:
    dom = Domain({"x": size, "y": size, "s": 4}, ordered={"x", "y"})
    cases = {
        "prefix x + prefix y": (Workload.prefix(dom, "x") + Workload.prefix(dom, "y"), 1.09),
        "ranges x + marginal (y, s)": (Workload.all_range(dom, "x") + Workload.marginals(dom, [("y", "s")]), 1.03),
        "ranges x + ranges y + s": (Workload.all_range(dom, "x") + Workload.all_range(dom, "y") + Workload.marginals(dom, [("s",)]), 1.04),
    }
    for name, (workload, ratio) in cases.items():
        chosen = plan(workload, Privacy.zcdp(1.0))
        assert isinstance(chosen.candidate, CompositeCandidate), name
        others = [c for c in all_candidates(workload, Privacy.zcdp(1.0)) if not isinstance(c, CompositeCandidate)]
        assert chosen.expected_error() < 0.95 * min(c.expected_error() for c in others), name
        assert chosen.expected_error() / svd_bound(workload, Privacy.zcdp(1.0)) < ratio, name
        assert "composite(" in chosen.explain()


# --------------------------------------------------------------------------------------------------
# Through SQL: a batch of range statements beside a GROUP BY.
# --------------------------------------------------------------------------------------------------

BATCH = [
    "SELECT COUNT(*) FROM adult WHERE age BETWEEN 25 AND 34",
    "SELECT COUNT(*) FROM adult WHERE age BETWEEN 35 AND 60",
    "SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race",
    "SELECT COUNT(*) FROM adult",
]


def test_a_sql_batch_of_ranges_beside_a_group_by_is_answered_by_a_composite(adult_connection, adult_frame) -> None:
    import dpsql.testing
    from pipeline_helpers import prepare

    prepared = prepare(adult_connection, BATCH, epsilon=1.0)
    candidate = prepared.plan.candidate
    assert isinstance(candidate, CompositeCandidate)
    assert [p.link.attributes for p in candidate.parts] == [("age",), ("sex", "race")]
    with dpsql.testing.noise_disabled():
        exact = adult_connection.workload(BATCH, epsilon=1.0)
    ages = adult_frame.age
    assert exact[0].rows[0][0] == pytest.approx(((ages >= 25) & (ages <= 34)).sum(), abs=1e-6)
    assert exact[1].rows[0][0] == pytest.approx(((ages >= 35) & (ages <= 60)).sum(), abs=1e-6)
    cells = adult_frame.groupby(["sex", "race"]).size().to_dict()
    assert {(sex, race): count for sex, race, count in exact[2].rows if count} == pytest.approx(cells, abs=1e-6)
    assert exact[3].rows[0][0] == pytest.approx(len(adult_frame), abs=1e-6)

    with dpsql.testing.seeded(3):
        noisy = adult_connection.workload(BATCH, epsilon=1.0, non_negative=True)
    cells, total = noisy[2].rows, noisy[3].rows[0][0]
    assert sum(count for *_, count in cells) == pytest.approx(total, rel=1e-8)  # the parts agree on the total (to the 10 digits released)
    assert total != pytest.approx(len(adult_frame), abs=0.5)  # noise was added
    variances = candidate.query_variances()
    assert [e[2] for e in noisy[2].errors] == pytest.approx(np.sqrt(variances[2]).tolist(), rel=1e-9)
    assert noisy[3].errors[0][0] == pytest.approx(math.sqrt(variances[3][0]), rel=1e-9)
    assert "non-negative answers unavailable" in noisy[0].explanation and "composite(" in noisy[0].explanation
    explained = adult_connection.cursor().execute("EXPLAIN " + "; ".join(BATCH), epsilon=1.0).fetchall()
    assert any(row[0] == "strategy" and str(row[1]).startswith("composite(age: ") for row in explained)


# --------------------------------------------------------------------------------------------------
# Parts sharing a small attribute set Z: ranges by a demographic beside a demographic table.
# --------------------------------------------------------------------------------------------------

STAR = Domain({"age": 8, "sex": 2, "race": 3, "edu": 4, "x": 5}, ordered={"age", "x"})


def by(*factors: tuple[str, object], dom: Domain = STAR) -> Workload:
    return product(*factors, dom=dom)


def ranges_by_sex(dom: Domain = STAR) -> Workload:
    n = dom.size_of("age")
    return by(("age", AllRange(n)), ("sex", Identity(2)), dom=dom) + Workload.marginals(dom, [("sex", "race")])


def two_shared(dom: Domain = STAR) -> Workload:
    """Z = {sex, race}: ranges of age by (sex, race) beside the (sex, race, edu) table."""
    return by(("age", AllRange(8)), ("sex", Identity(2)), ("race", Identity(3))) + Workload.marginals(dom, [("sex", "race", "edu")])


def two_shared_and_a_third(dom: Domain = STAR) -> Workload:
    """:func:`two_shared` and prefixes of x by sex: a part measuring only sex of Z = {sex, race}."""
    return two_shared(dom) + by(("x", Prefix(5)), ("sex", Identity(2)))


def test_the_shared_set_is_the_smallest_that_splits_the_workload() -> None:
    assert composite.shared_attributes(Workload.prefix(DOM, "x") + Workload.prefix(DOM, "y")) == ()
    assert composite.shared_attributes(ranges_by_sex()) == ("sex",)
    assert parts_of(ranges_by_sex(), ("sex",)) == [(0,), (1,)]
    assert composite.shared_attributes(two_shared()) == ("sex", "race")
    assert parts_of(two_shared(), ("sex", "race")) == [(0,), (1,)]
    assert composite.shared_attributes(two_shared_and_a_third()) == ("sex",)  # x splits off at Z = {sex}
    assert composite.shared_attributes(Workload.marginals(STAR, [("age", "sex", "race")])) is None
    big = Domain({"a": 9, "b": 9, "c": 2}, ordered={"a"})  # 81 cells of (a, b) is more than 64
    assert composite.shared_attributes(Workload.marginals(big, [("a", "b", "c"), ("a", "b")])) is None
    assert composite.shared_attributes(Workload.marginals(big, [("a", "b"), ("b", "c")])) == ("b",)


def assert_link_matches_dense(candidate: Candidate, shared: tuple[str, ...]) -> None:
    """``D = Cov(x̂_M, z)`` from the dense GLS covariance of the candidate alone."""
    link = composite.shared_link(candidate, shared)
    assert link is not None and link.shared == tuple(a for a in link.attributes if a in shared)
    dom = candidate.workload.domain
    covariance = np.linalg.pinv(dense_precision(candidate), rcond=1e-12, hermitian=True)
    summing = Workload.marginals(dom, [link.attributes, link.shared]).dense()
    rows = math.prod(dom.shape(link.attributes))
    want = summing[:rows] @ covariance @ summing[rows:].T
    got = link.covariance.reshape(rows, -1)
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10 * np.abs(want).max())
    want = summing[rows:] @ covariance @ summing[rows:].T
    np.testing.assert_allclose(link.shared_variance, want, rtol=1e-8, atol=1e-10 * np.abs(want).max())


@pytest.mark.parametrize("privacy", [ZCDP, LAPLACE], ids=["zcdp", "laplace"])
def test_links_to_a_shared_marginal_match_dense_covariances(privacy: Privacy) -> None:
    workload = ranges_by_sex()
    ranges, table = Workload(STAR, workload.products[:1]), Workload(STAR, workload.products[1:])
    range_families = [hierarchy.candidates] + ([hats.candidates] if privacy.is_laplace else [eigen.candidates])
    checked = 0
    for family in range_families + [identity.candidates, marginals.candidates, residual.candidates]:  # Fourier pads STAR
        for part in (ranges, table):
            for candidate in family(part, privacy, 1):
                if isinstance(candidate, CoefficientCandidate) and not candidate.consistent:
                    continue
                assert_link_matches_dense(candidate, ("sex",))
                checked += 1
    assert checked >= 6
    # a Kronecker part whose identity attributes hold Z, and one with two shared attributes
    dom = Domain({"x": 8, "y": 4, "s": 2, "t": 3}, ordered={"x", "y"})
    grid = product(("x", AllRange(8)), ("y", AllRange(4)), ("s", Identity(2)), ("t", Identity(3)), dom=dom)
    (kron,) = kronecker.candidates(grid, privacy)
    assert_link_matches_dense(kron, ("s", "t"))
    assert composite.shared_link(kron, ("x",)) is None  # Z on a factored attribute: not handled
    cells = Workload.marginals(dom, [("s", "t"), ("y", "s", "t")])
    for candidate in marginals.candidates(cells, privacy, 1):
        assert_link_matches_dense(candidate, ("s", "t"))
    (tree,) = hierarchy.candidates(Workload(STAR, workload.products[:1]), privacy, 1)
    assert composite.shared_link(tree, ("age",)) is None  # Z on the ordered attribute: not handled


def planned_parts(workload: Workload, privacy: Privacy, shared: tuple[str, ...], families, shares) -> list[Part]:
    parts = []
    for products, family, share in zip(parts_of(workload, shared), families, shares):
        sub = Workload(workload.domain, tuple(workload.products[i] for i in products))
        candidate = next(c for c in family(sub, privacy.scaled(share), 1) if getattr(c, "consistent", True))
        parts.append(Part(products, candidate, composite.shared_link(candidate, shared)))
    return parts


@pytest.mark.parametrize("privacy", [ZCDP, LAPLACE], ids=["zcdp", "laplace"])
def test_parts_sharing_attributes_match_dense_gls(privacy: Privacy) -> None:
    ranges = eigen.candidates if not privacy.is_laplace else hats.candidates
    for workload, shared, families, shares in [
        (ranges_by_sex(), ("sex",), (ranges, marginals.candidates), (0.625, 0.375)),
        (ranges_by_sex(), ("sex",), (hierarchy.candidates, identity.candidates), (0.5, 0.5)),
        (two_shared(), ("sex", "race"), (hierarchy.candidates, marginals.candidates), (0.75, 0.25)),
        (two_shared_and_a_third(), ("sex", "race"), (hierarchy.candidates, marginals.candidates, ranges), (0.5, 0.25, 0.25)),
    ]:
        candidate = CompositeCandidate(workload, privacy, planned_parts(workload, privacy, shared, families, shares), shared)
        assert candidate.name.endswith(" on " + ", ".join(shared))
        assert_matches_dense_gls(candidate)
    # the third part measures only sex of Z: it shares its sex marginal
    assert candidate.parts[2].link.shared == ("sex",)
    small = Domain({"age": 32, "sex": 2, "race": 3}, ordered={"age"})  # ε-DP: ranges on 8 ages go to marginals
    (planned,) = composite_candidates(ranges_by_sex(small), privacy, 1)
    assert planned.shared == ("sex",) and len(planned.parts) == 2
    assert_matches_dense_gls(planned)


@pytest.mark.parametrize("privacy", [ZCDP, LAPLACE], ids=["zcdp", "laplace"])
def test_parts_agree_exactly_on_the_shared_marginal_and_noise_free_answers_are_exact(privacy: Privacy) -> None:
    workload, shared = two_shared_and_a_third(), ("sex", "race")
    families = (hierarchy.candidates, marginals.candidates, hierarchy.candidates)
    candidate = CompositeCandidate(workload, privacy, planned_parts(workload, privacy, shared, families, (0.5, 0.25, 0.25)), shared)
    data = random_data(STAR)
    answers = candidate.answer(candidate.measure(data, rng=7)).values
    full = answers[0].reshape(-1, 2, 3)[7]  # range [0, 7] of age by (sex, race): the (sex, race) marginal
    table = answers[1].reshape(2, 3, 4).sum(axis=2)
    prefix_by_sex = answers[2].reshape(2, 5)[:, -1]  # x part: prefix [0, 4] by sex (rows in domain order)
    np.testing.assert_allclose(full, table, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(prefix_by_sex, table.sum(axis=1), rtol=1e-12, atol=1e-9)
    raw = [composite.answers_and_shared(p.candidate, candidate._part_measurement(i, candidate.measure(data, rng=7)), p.link.shared)[1] for i, p in enumerate(candidate.parts)]
    assert not np.allclose(raw[0], raw[1])  # the parts' own estimates differed (noise)
    exact = candidate.answer(candidate.measure(data, noise=False)).values
    for got, want in zip(exact, workload.answer(data)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)


def test_a_part_that_estimates_only_some_shared_directions_is_not_used() -> None:
    """Z = {sex}: a part asking only the sex contrast beside ranges of age by sex has a singular but
    non-zero K: no pseudo-inverse, the composite is refused (and not offered)."""
    contrast = by(("sex", Explicit([[1.0, -1.0]])), ("race", Identity(3)))
    candidate = marginals.candidates(contrast, ZCDP, 1)[0]
    link = composite.shared_link(candidate, ("sex",))
    assert link is not None and np.any(link.shared_variance)
    assert not link.combinable
    with pytest.raises(ValueError, match="singular"):
        _ = link.shared_precision


def test_the_planner_chooses_a_shared_composite_for_ranges_by_a_demographic() -> None:
    dom = Domain({"age": 74, "sex": 2, "race": 5}, ordered={"age"})
    workload = ranges_by_sex(dom)
    chosen = plan(workload, Privacy.zcdp(1.0))
    assert isinstance(chosen.candidate, CompositeCandidate) and chosen.candidate.shared == ("sex",)
    assert chosen.expected_error() / svd_bound(workload, Privacy.zcdp(1.0)) < 1.05  # the marginals family: 2.79


def test_a_sql_batch_of_ranges_by_sex_beside_sex_by_race_shares_sex(adult_frame, adult_schema) -> None:
    """Range counts broken down by sex beside the (sex, race) table, Gaussian noise: one composite sharing
    the sex marginal; with the noise disabled every count equals the table's, and with noise the two
    statements imply one and the same sex marginal."""
    import dpsql
    import dpsql.testing
    from pipeline_helpers import prepare

    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1000.0, delta=1e-6), noise="gaussian")
    connection.register("adult", adult_frame, schema=adult_schema)
    batch = [
        "SELECT sex, COUNT(*) FROM adult WHERE age BETWEEN 25 AND 34 GROUP BY sex",
        "SELECT sex, COUNT(*) FROM adult WHERE age BETWEEN 35 AND 60 GROUP BY sex",
        "SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race",
    ]
    plan = prepare(connection, batch, rho=0.5).plan
    assert plan.strategy_name.startswith("composite(") and plan.strategy_name.endswith(" on sex")
    with dpsql.testing.noise_disabled():
        exact = connection.workload(batch, rho=0.5)
    frame = adult_frame
    for statement, (low, high) in zip(exact[:2], [(25, 34), (35, 60)]):
        want = frame[(frame.age >= low) & (frame.age <= high)].groupby("sex").size().to_dict()
        assert dict(statement.rows) == pytest.approx(want, abs=1e-6)
    cells = {(sex, race): n for sex, race, n in exact[2].rows}
    assert cells == pytest.approx(frame.groupby(["sex", "race"]).size().to_dict(), abs=1e-6)
    connection.close()
