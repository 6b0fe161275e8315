"""Kronecker range strategies: exact error against dense GLS, exact sensitivity and integer arithmetic,
noise-free answers, empirical variance, and when the family is offered and chosen."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner import (
    AllRange,
    Domain,
    Factor,
    Identity,
    Predicate,
    Prefix,
    Privacy,
    Product,
    Workload,
    plan,
    select,
)
from planner.strategies import kronecker
from planner.workload import Total

PRIVACY = [Privacy.zcdp(0.7), Privacy.laplace(0.9)]


def mixed_workload() -> Workload:
    """Ranges on x and y with a GROUP BY attribute s between them, and products that sum x or s out."""
    dom = Domain({"x": 6, "s": 3, "y": 5}, ordered={"x", "y"})
    interval = np.zeros(5, dtype=bool)
    interval[1:4] = True
    return Workload(dom, (
        Product(dom, (Factor(("x",), AllRange(6)), Factor(("s",), Identity(3)), Factor(("y",), AllRange(5)))),
        Product(dom, (Factor(("x",), Prefix(6)), Factor(("y",), Prefix(5))), 0.5),
        Product(dom, (Factor(("y",), AllRange(5)), Factor(("s",), Identity(3))), 2.0),
        Product(dom, (Factor(("x",), Identity(6)), Factor(("y",), Predicate(interval)))),
    ))


def only_candidate(workload: Workload, privacy: Privacy, contributions: int = 1) -> kronecker.KroneckerCandidate:
    (candidate,) = kronecker.candidates(workload, privacy, contributions)
    assert isinstance(candidate, kronecker.KroneckerCandidate)
    return candidate


def full_strategy(candidate: kronecker.KroneckerCandidate) -> np.ndarray:
    """``⊗`` over the measured marginal (domain order), identity on attributes outside ``T``, densely."""
    layout = candidate.layout
    result = np.ones((1, 1), dtype=np.int64)
    for attribute in layout.measured:
        factor = candidate.factors.get(attribute)
        result = np.kron(result, np.eye(layout.domain.size_of(attribute), dtype=np.int64) if factor is None else factor.rows)
    return result


@pytest.mark.parametrize("privacy", PRIVACY)
def test_error_and_variances_equal_dense_gls_and_sensitivity_is_exact(privacy: Privacy) -> None:
    workload = mixed_workload()
    candidate = only_candidate(workload, privacy, contributions=2)
    assert candidate.layout.ordered == ("x", "y") and candidate.layout.measured == ("x", "s", "y")
    strategy = full_strategy(candidate)
    if privacy.is_laplace:
        assert candidate.noise.parameter == 2 * int(np.abs(strategy).sum(axis=0).max()) / 0.9
    else:
        assert candidate.noise.parameter == pytest.approx(4 * int((strategy**2).sum(axis=0).max()) / (2 * 0.7), rel=1e-15)
    dense = strategy.astype(float)
    covariance = candidate.noise.variance * np.linalg.inv(dense.T @ dense)  # Σ = v I
    W = workload.dense()  # the domain is the measured marginal here
    assert candidate.expected_error() == pytest.approx(np.trace(W @ covariance @ W.T), rel=1e-9)
    weights = np.concatenate([np.full(p.rows, p.weight) for p in workload.products])
    variances = np.concatenate(candidate.query_variances())
    assert variances == pytest.approx(np.einsum("ij,jk,ik->i", W, covariance, W) / weights**2, rel=1e-9)


@pytest.mark.parametrize("privacy", PRIVACY)
def test_noise_free_answers_are_the_exact_workload_answers(privacy: Privacy) -> None:
    workload = mixed_workload()
    candidate = only_candidate(workload, privacy)
    data = np.random.default_rng(3).integers(0, 40, size=(6, 3, 5))
    answers = candidate.answer(candidate.measure({("x", "s", "y"): data}, noise=False))
    for value, want in zip(answers.values, workload.answer({("x", "s", "y"): data})):
        np.testing.assert_allclose(value, want, rtol=0, atol=1e-7)


def test_answers_come_from_a_finer_marginal_and_measurements_are_checked() -> None:
    """A marginal with an extra attribute z is summed down to the measured one; a measurement made by
    another strategy is refused."""
    workload = mixed_workload()
    candidate = only_candidate(workload, PRIVACY[0])
    data = np.random.default_rng(4).integers(0, 9, size=(6, 3, 5, 2))
    measurement = candidate.measure({("x", "s", "y", "z"): data}, noise=False)
    for value, want in zip(candidate.answer(measurement).values, workload.answer({("x", "s", "y"): data.sum(axis=3)})):
        np.testing.assert_allclose(value, want, rtol=0, atol=1e-7)
    with pytest.raises(ValueError, match="made by 'eigen'"):
        candidate.answer(type(measurement)("eigen", measurement.values, measurement.variances, measurement.privacy))


@pytest.mark.parametrize("privacy", PRIVACY)
def test_empirical_error_matches_prediction(privacy: Privacy) -> None:
    """All 2-D ranges on 8 × 8 cells for each of 300 cells of a GROUP BY attribute (independent
    measurements): the mean total squared error per cell lies within 4 standard errors of the prediction."""
    repetitions = 300
    dom = Domain({"rep": repetitions, "x": 8, "y": 8}, ordered={"x", "y"})
    workload = Workload(dom, (Product(dom, (
        Factor(("rep",), Identity(repetitions)), Factor(("x",), AllRange(8)), Factor(("y",), AllRange(8)),
    )),))
    candidate = only_candidate(workload, privacy)
    data = np.random.default_rng(5).integers(0, 30, size=(repetitions, 8, 8))
    truth = workload.answer({("rep", "x", "y"): data})[0]
    answers = candidate.answer(candidate.measure({("rep", "x", "y"): data}, rng=6)).values[0]
    errors = ((answers - truth) ** 2).reshape(repetitions, -1).sum(axis=1)
    standard_error = errors.std(ddof=1) / math.sqrt(repetitions)
    assert abs(errors.mean() - candidate.expected_error() / repetitions) < 4 * standard_error
    assert standard_error < 0.1 * errors.mean()  # the check has power


def test_integer_arithmetic_is_exact_at_the_overflow_limit() -> None:
    """All rows in the cell under the largest entry of ``S_x ⊗ S_y``: the measured integers equal exact
    Python-int products up to ``N · Π max|S_a| < 2^62``; one more doubling of ``N`` is refused."""
    dom = Domain({"x": 16, "y": 16}, ordered={"x", "y"})
    workload = Workload(dom, (Product(dom, (Factor(("x",), AllRange(16)), Factor(("y",), AllRange(16)))),))
    candidate = only_candidate(workload, PRIVACY[0])
    S_x, S_y = candidate.factors["x"].rows, candidate.factors["y"].rows
    column_x, column_y = np.argmax(np.abs(S_x).max(axis=0)), np.argmax(np.abs(S_y).max(axis=0))
    largest = int(np.abs(S_x).max()) * int(np.abs(S_y).max())
    assert 2**22 <= largest <= 2**25  # TOTAL_SCALE_BITS = 24 (column norms), entries a bit below
    count = 2 ** (61 - largest.bit_length())
    data = np.zeros((16, 16), dtype=np.int64)
    data[column_x, column_y] = count
    measured = candidate.measure({("x", "y"): data}, noise=False).values[kronecker.GROUP]
    exact = [[int(a) * int(b) * count for b in S_y[:, column_y]] for a in S_x[:, column_x]]
    assert measured.dtype == np.int64 and measured.tolist() == exact
    assert int(np.abs(measured).max()) >= 2**59
    data[column_x, column_y] = 2 * 2 ** (62 - largest.bit_length())
    with pytest.raises(ValueError, match="too many rows"):
        candidate.measure({("x", "y"): data}, noise=False)


def test_offered_only_for_ranges_on_two_ordered_attributes() -> None:
    dom = Domain({"x": 16, "y": 16, "s": 3}, ordered={"x", "y"})
    zcdp = PRIVACY[0]
    one_attribute = [
        Workload.all_range(dom, "x"),
        Workload(dom, (Product(dom, (Factor(("x",), AllRange(16)), Factor(("y",), Identity(16)))),)),
        Workload(dom, (Product(dom, (Factor(("x",), Prefix(16)), Factor(("s",), Identity(3)))),)),
    ]
    for workload in one_attribute:
        assert kronecker.candidates(workload, zcdp) == []
    coupled = Workload(dom, (
        Product(dom, (Factor(("x", "y"), Identity(256)),)),
        Product(dom, (Factor(("x",), AllRange(16)), Factor(("y",), AllRange(16)))),
    ))
    assert kronecker.candidates(coupled, zcdp) == []
    separate = Workload.prefix(dom, "x") + Workload.prefix(dom, "y")  # no product ranges over both
    assert kronecker.candidates(separate, zcdp) == []
    together = separate + Workload(dom, (Product(dom, (Factor(("x",), Prefix(16)), Factor(("y",), Prefix(16)))),))
    assert len(kronecker.candidates(together, zcdp)) == 1
    assert any(isinstance(c, type(kronecker.candidates(together, zcdp)[0])) for c in select.all_candidates(together, zcdp))


@pytest.mark.parametrize(
    ("privacy", "name", "ratio", "margin"),
    [(PRIVACY[0], "kronecker(x: eigen, y: eigen)", 1.05, 1.4), (PRIVACY[1], "kronecker(x: p-identity", 6.8, 1.05)],
)
def test_plan_chooses_it_for_two_dimensional_ranges(privacy: Privacy, name: str, ratio: float, margin: float) -> None:
    """All 2-D ranges on 32 × 32: ratios to the SVD bound 1.047 (zCDP) and 6.76 (ε-DP); the next best
    family (Fourier; p-identity with ridge noise ⊗ I) is 1.48× and 1.058× worse."""
    dom = Domain({"x": 32, "y": 32}, ordered={"x", "y"})
    workload = Workload(dom, (Product(dom, (Factor(("x",), AllRange(32)), Factor(("y",), AllRange(32)))),))
    chosen = plan(workload, privacy)
    assert chosen.strategy_name.startswith(name)
    assert 1.0 < chosen.expected_error() / chosen.svd_bound() < ratio
    others = [s.expected_error for s in chosen.candidates if not s.name.startswith("kronecker")]
    assert min(others) > margin * chosen.expected_error()


def test_alternation_weights_factors_by_the_other_attributes_traces() -> None:
    """All 2-D ranges plus prefixes on y with x summed out (weight 30). The first round weights y's blocks
    by x's Frobenius masses (all ranges on 20 cells: n(n+1)(n+2)/6 = 1540; the total: 20), later
    rounds by ``tr(B_x C_x B_xᵀ)``; the kept round is never worse than the first, and the error is the
    closed form ``v Σ_p w_p² Π_a tr_a`` with ``1ᵀC_x1`` where x is summed out."""
    dom = Domain({"x": 20, "y": 24}, ordered={"x", "y"})
    workload = Workload(dom, (
        Product(dom, (Factor(("x",), AllRange(20)), Factor(("y",), AllRange(24)))),
        Product(dom, (Factor(("y",), Prefix(24)),), 30.0),
    ))
    layout = kronecker.kronecker_layout(workload)
    assert layout is not None
    traces = kronecker.frobenius_traces(layout)
    assert traces == [{"x": 1540.0, "y": 2600.0}, {"x": 20.0, "y": 300.0}]
    sub_y = layout.sub_workload("y", kronecker.sub_weights(layout, "y", traces))
    assert sub_y is not None
    assert [type(p.factors[0].block) for p in sub_y.products] == [AllRange, Prefix]
    assert [p.weight**2 for p in sub_y.products] == pytest.approx([1540 / 18000, 1.0], rel=1e-12)
    build = kronecker.factor_builder(PRIVACY[0], kronecker.TOTAL_SCALE_BITS // 2)
    sub_x = layout.sub_workload("x", kronecker.sub_weights(layout, "x", traces))
    assert sub_x is not None
    start = kronecker.KroneckerCandidate(
        layout, PRIVACY[0], kronecker.Sensitivity(), {"x": build(sub_x), "y": build(sub_y)}
    )
    final = only_candidate(workload, PRIVACY[0])
    assert final.expected_error() <= start.expected_error()
    first, second = workload.products
    assert isinstance(layout.block(second, "x"), Total)
    assert final.product_trace(second, "x") == pytest.approx(float(final.factors["x"].covariance.matrix().sum()), rel=1e-12)
    closed = final.noise.variance * (
        final.product_trace(first, "x") * final.product_trace(first, "y")
        + 900 * final.product_trace(second, "x") * final.product_trace(second, "y")
    )
    assert final.expected_error() == pytest.approx(closed, rel=1e-12)


@pytest.mark.parametrize(
    ("privacy", "bits"), [(Privacy.zcdp(1.0), 12), (Privacy.zcdp(1e-9), 6), (Privacy.laplace(1e-6), 9), (Privacy.laplace(1e-9), 4)]
)
def test_tiny_budgets_get_coarser_factors_within_the_noise_limits(privacy: Privacy, bits: int) -> None:
    """``bits = min(24, ⌊log₂ room⌋ − 2) // 2`` with room ``2^40 ε`` (Laplace scale limit) or
    ``√(2^60 · 2ρ)`` (σ² limit); below 6 bits the family stays out."""
    assert kronecker.factor_bits(2, privacy, 1) == bits
    dom = Domain({"x": 16, "y": 16}, ordered={"x", "y"})
    workload = Workload(dom, (Product(dom, (Factor(("x",), Prefix(16)), Factor(("y",), Prefix(16)))),))
    found = kronecker.candidates(workload, privacy)
    if bits < kronecker.MIN_FACTOR_BITS:
        assert found == []
        return
    (candidate,) = found
    largest = max(int(np.abs(f.rows).max()) for f in candidate.factors.values())
    assert 2 ** (bits - 1) < largest <= 2**bits
    data = np.random.default_rng(7).integers(0, 5, size=(16, 16))
    assert candidate.measure({("x", "y"): data}, rng=8).values[kronecker.GROUP].dtype == np.int64


@pytest.mark.parametrize("privacy", PRIVACY)
def test_three_ordered_attributes_match_dense_gls(privacy: Privacy) -> None:
    """|T| = 3 (8 scale bits per factor): error and noise-free answers against the dense computation."""
    dom = Domain({"x": 4, "y": 3, "z": 5}, ordered={"x", "y", "z"})
    workload = Workload(dom, (
        Product(dom, (Factor(("x",), AllRange(4)), Factor(("y",), Prefix(3)), Factor(("z",), AllRange(5)))),
        Product(dom, (Factor(("x",), Prefix(4)), Factor(("z",), Identity(5))), 3.0),
    ))
    candidate = only_candidate(workload, privacy)
    assert candidate.layout.ordered == ("x", "y", "z")
    assert max(int(np.abs(f.rows).max()) for f in candidate.factors.values()) <= 2**8
    dense = full_strategy(candidate).astype(float)
    W = workload.dense()
    exact = candidate.noise.variance * np.trace(W @ np.linalg.inv(dense.T @ dense) @ W.T)
    assert candidate.expected_error() == pytest.approx(exact, rel=1e-9)
    data = np.random.default_rng(9).integers(0, 25, size=(4, 3, 5))
    answers = candidate.answer(candidate.measure({("x", "y", "z"): data}, noise=False))
    for value, want in zip(answers.values, workload.answer({("x", "y", "z"): data})):
        np.testing.assert_allclose(value, want, rtol=0, atol=1e-7)


def test_a_sql_batch_of_two_dimensional_ranges_is_answered_by_a_kronecker_strategy(adult_frame, adult_schema) -> None:
    """Twenty statements filtering on an age range AND an income range: one Kronecker plan (zCDP; under
    ε-DP p-Identity with ridge noise on the age ranges wins here), and with the noise disabled every
    count equals the table's."""
    import itertools

    import dpsql
    import dpsql.testing
    from pipeline_helpers import prepare

    ages = [(17, 29), (30, 44), (45, 64), (65, 90), (17, 44)]
    incomes = [(0, 10_000), (10_000, 50_000), (0, 50_000), (50_000, 1_000_000)]
    cases = list(itertools.product(ages, incomes))
    batch = [
        f"SELECT COUNT(*) FROM adult WHERE age BETWEEN {a} AND {b} AND income >= {low} AND income < {high}"
        for (a, b), (low, high) in cases
    ]
    adult_connection = dpsql.connect(budget=dpsql.Budget(epsilon=1000.0, delta=1e-6), noise="gaussian")
    adult_connection.register("adult", adult_frame, schema=adult_schema)
    assert prepare(adult_connection, batch, rho=0.5).plan.strategy_name.startswith("kronecker(age: ")
    with dpsql.testing.noise_disabled():
        results = adult_connection.workload(batch, rho=0.5)
    frame = adult_frame
    for ((a, b), (low, high)), result in zip(cases, results):
        want = ((frame.age >= a) & (frame.age <= b) & (frame.income >= low) & (frame.income < high)).sum()
        assert result.rows[0][0] == pytest.approx(want, abs=1e-6)
