"""The planner's public API and the papers' worked numbers (docs/math.md §1, §2, §7)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner import AllRange, Domain, Factor, Identity, Predicate, Prefix, Privacy, Product, Workload, plan
from planner.budget import Sensitivity, grouped_error, laplace_budgets
from planner.select import BoundUnavailableError
from planner.strategies.marginals import MarginalsCandidate

FIGURE1_DOMAIN = Domain({"A": 2, "B": 2, "C": 2})
FIGURE1_X = np.array([1, 2, 0, 1, 0, 0, 1, 0]).reshape(2, 2, 2)


def figure1_workload() -> Workload:
    return Workload.marginals(FIGURE1_DOMAIN, [("A",), ("B", "C")])


def test_figure1_uniform_budgets_give_48() -> None:
    # six queries, sensitivity 2: each group gets ε/2
    assert grouped_error([2, 4], [1, 1], [0.5, 0.5], Privacy.laplace(1.0)) == pytest.approx(48.0)


def test_figure1_closed_form_budgets_give_46_17() -> None:
    budgets = laplace_budgets([2, 4], [1, 1], 1.0)
    assert budgets.sum() == pytest.approx(1.0)
    assert grouped_error([2, 4], [1, 1], budgets, Privacy.laplace(1.0)) == pytest.approx(2 * (2 ** (1 / 3) + 4 ** (1 / 3)) ** 3)
    assert grouped_error([2, 4], [1, 1], budgets, Privacy.laplace(1.0)) == pytest.approx(46.17, abs=0.005)


def test_figure1_closed_form_budgets_then_gls_give_38_06() -> None:
    budgets = laplace_budgets([2, 4], [1, 1], 1.0)
    candidate = MarginalsCandidate(figure1_workload(), Privacy.laplace(1.0), Sensitivity(), [("A",), ("B", "C")], budgets)
    assert candidate.expected_error(continuous=True) == pytest.approx(38.06, abs=0.005)
    # the released plan reports the exact discrete-Laplace variances, which are smaller than 2b²
    assert candidate.expected_error() < candidate.expected_error(continuous=True)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_figure1_planner_choice_beats_identity(epsilon: float) -> None:
    chosen = plan(figure1_workload(), Privacy.laplace(epsilon))
    assert chosen.candidate.expected_error(continuous=True) <= 32.0 / epsilon**2 + 1e-9
    assert chosen.expected_error() <= 32.0 / epsilon**2
    names = {s.name for s in chosen.candidates}
    assert {"identity", "marginals", "fourier"} <= names


def bmi_workload() -> Workload:
    """Machanavajjhala's lecture: males with BMI<25, males, females with BMI<25, females (bmi cell 0 = BMI<25)."""
    dom = Domain({"sex": 2, "bmi": 2})
    under_25 = Product(dom, (Factor(("sex",), Identity(2)), Factor(("bmi",), Predicate([True, False]))))
    return Workload(dom, (under_25,)) + Workload.marginals(dom, [("sex",)])


def test_bmi_counts_planner_reaches_12() -> None:
    workload = bmi_workload()
    per_query = 4 * 2 * 4.0**2  # each of 4 counts with Lap(4/ε)
    assert per_query == 128.0
    chosen = plan(workload, Privacy.laplace(1.0))
    assert chosen.candidate.expected_error(continuous=True) <= 12.0 + 1e-9
    assert chosen.expected_error() <= 12.0


def test_plan_api_round_trip_without_noise() -> None:
    dom = Domain({"a": 2, "b": 2, "c": 2}, ordered={"c"})
    workload = Workload.marginals(dom, [("a",), ("b", "c")])
    for privacy in (Privacy.laplace(1.0), Privacy.zcdp(1.0)):
        chosen = plan(workload, privacy)
        assert chosen.privacy == privacy and chosen.workload is workload
        assert isinstance(chosen.strategy_name, str) and chosen.strategy_name
        marginals = {attrs: FIGURE1_X.sum(axis=tuple(i for i, a in enumerate("abc") if a not in attrs))
                     for attrs in chosen.required_marginals()}
        answers = chosen.answer(chosen.measure(marginals, noise=False))
        exact = workload.answer({("a", "b", "c"): FIGURE1_X})
        for got, want, variances, product in zip(answers.values, exact, answers.variances, workload.products):
            np.testing.assert_allclose(got, want, atol=1e-9)
            assert variances.shape == (product.rows,)
        total = sum(p.weight**2 * v.sum() for p, v in zip(workload.products, chosen.query_variances()))
        assert chosen.expected_error() == pytest.approx(total)
        budgets = [g.budget for g in chosen.group_budgets()]
        assert sum(budgets) == pytest.approx(privacy.epsilon if privacy.is_laplace else privacy.rho)
        text = chosen.explain()
        assert chosen.strategy_name in text and "lower bound" in text and "RMSE" in text


def test_gaussian_marginals_reach_the_svd_bound() -> None:
    dom = Domain({"a": 3, "b": 4, "c": 5})
    chosen = plan(Workload.all_kway(dom, 2), Privacy.zcdp(0.5))
    assert chosen.svd_bound() > 0
    # the discrete Gaussian has slightly less variance than σ²: below the continuous bound, at the discrete one
    assert chosen.ratio == pytest.approx(1.0, abs=1e-6) and chosen.ratio >= 1


def test_svd_bound_of_the_total_query() -> None:
    dom = Domain({"a": 3, "b": 4})
    # one query of sensitivity 1: Gaussian σ² = 1/(2ρ) is optimal
    chosen = plan(Workload.total(dom), Privacy.zcdp(2.0))
    assert chosen.svd_bound() == pytest.approx(1 / 4)
    laplace = plan(Workload.total(dom), Privacy.laplace(1.0))
    assert laplace.svd_bound() == pytest.approx(2.0)
    # the total has the single singular value √n: Σσ²/n = 1 on any domain, also one with no attributes
    for cells in (Domain({"a": 7}), Domain({})):
        chosen = plan(Workload.total(cells), Privacy.laplace(0.5))
        q = math.exp(-0.5)  # one measured total with discrete Laplace noise: variance 2q/(1-q)² below 2/ε² = 8
        assert chosen.svd_bound() == pytest.approx(8.0) and chosen.lower_bound() == pytest.approx(2 * q / (1 - q) ** 2)
        assert chosen.ratio == pytest.approx(1.0, rel=1e-5)  # the one row gets the least noise any row can: optimal
        assert "unavailable" not in chosen.explain()
    twice = plan(Workload(Domain({}), Workload.total(Domain({})).products * 2), Privacy.laplace(1.0))
    assert twice.svd_bound() == pytest.approx(2 * 2.0)  # σ = √2 on one cell: 2(Σσ)²/ε² = 4


def test_contributions_scale_the_error() -> None:
    workload = figure1_workload()
    single = plan(workload, Privacy.zcdp(1.0))
    triple = plan(workload, Privacy.zcdp(1.0), contributions=3)
    assert triple.candidate.expected_error(continuous=True) == pytest.approx(9 * single.candidate.expected_error(continuous=True))
    assert triple.svd_bound() == pytest.approx(9 * single.svd_bound())
    distinct = plan(workload, Privacy.zcdp(1.0), contributions=3, distinct_cells=True)
    assert distinct.svd_bound() == pytest.approx(3 * single.svd_bound())
    assert distinct.expected_error() < triple.expected_error()


def test_bad_inputs_are_rejected_with_clear_errors() -> None:
    with pytest.raises(TypeError, match="Workload"):
        plan("SELECT 1", Privacy.laplace(1.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="contributions"):
        plan(figure1_workload(), Privacy.laplace(1.0), contributions=0)
    chosen = plan(figure1_workload(), Privacy.laplace(1.0))
    with pytest.raises(TypeError, match="integer counts"):
        chosen.measure({("A", "B", "C"): FIGURE1_X + 0.5})
    with pytest.raises(KeyError):
        chosen.measure({("A",): FIGURE1_X.sum(axis=(1, 2))})


def test_svd_bound_unavailable_is_reported_not_raised_by_explain() -> None:
    # prefix sums and the summed-out 11ᵀ do not commute on t (2,000 cells to treat densely), and the
    # marginal space has 2,000 + 10⁴ cells: both beyond MAX_MARGINAL_SPACE
    dom = Domain({"a": 3, "b": 100, "c": 100, "t": 2000}, ordered={"t"})
    workload = Workload.prefix(dom, "t") + Workload.marginals(dom, [("b", "c")])
    chosen = plan(workload, Privacy.zcdp(1.0))
    with pytest.raises(BoundUnavailableError):
        chosen.svd_bound()
    assert chosen.ratio is None
    assert "unavailable" in chosen.explain()


def test_vectorized_discrete_variances_equal_the_noise_module() -> None:
    from planner import noise
    from planner.budget import discrete_variance

    sigma2 = np.geomspace(0.05, 1e7, 400)
    np.testing.assert_array_equal(discrete_variance("gaussian", sigma2), noise.discrete_gaussian_variance(sigma2))
    scales = np.geomspace(0.05, 1e7, 400)
    np.testing.assert_array_equal(discrete_variance("laplace", scales), noise.discrete_laplace_variance(scales))


def test_a_budget_too_small_for_any_exact_sampler_is_refused_with_advice() -> None:
    from planner.select import NoCandidateError

    workload = Workload.marginals(Domain({"x": 8}), [("x",)])
    with pytest.raises(NoCandidateError, match="use a larger budget"):
        plan(workload, Privacy.laplace(1e-13))  # identity needs scale 1e13 > 2^40
    assert plan(workload, Privacy.laplace(1e-9)).strategy_name == "identity"


def test_budget_splits_never_exceed_the_spec_in_exact_arithmetic() -> None:
    """ε·w_g/Σw in floating point sums to more than ε for about half of all random splits (by ulps);
    sequential composition needs Σ ε_g ≤ ε exactly."""
    from fractions import Fraction

    from planner.budget import gaussian_budgets, laplace_budgets, within

    rng = np.random.default_rng(0)
    exceeded = 0
    for _ in range(300):
        weights, total = rng.random(int(rng.integers(2, 30))), float(rng.choice([1.0, 0.3, 0.7, 2.5]))
        naive = total * weights / weights.sum()
        exceeded += sum(map(Fraction, naive.tolist())) > Fraction(total)
        for split in (within(naive, total), laplace_budgets(weights, np.ones(weights.size), total),
                      gaussian_budgets(weights, np.ones(weights.size), total)):
            assert sum(map(Fraction, split.tolist())) <= Fraction(total)
            np.testing.assert_allclose(split.sum(), total, rtol=1e-14)
    assert exceeded > 50  # the guard is needed


@pytest.mark.parametrize("privacy", [Privacy.laplace(0.7), Privacy.zcdp(0.3)])
def test_every_candidates_group_budgets_fit_the_spec_exactly(privacy: Privacy) -> None:
    from fractions import Fraction

    from planner.select import all_candidates

    dom = Domain({"a": 3, "b": 4, "c": 5, "t": 24, "u": 20}, ordered={"t", "u"})
    workloads = [
        Workload.all_kway(Domain({"a": 3, "b": 4, "c": 5}), 2),
        Workload.all_range(dom, "t") + Workload.marginals(dom, [("a", "b")]),
        Workload(dom, (Product(dom, (Factor(("t",), AllRange(24)), Factor(("u",), Prefix(20)))),)),
        Workload.prefix(dom, "t") + 2.0 * Workload.marginals(dom, [("a",), ("b", "c")]),
    ]
    spec = Fraction(privacy.epsilon if privacy.is_laplace else privacy.rho)
    for workload in workloads:
        for candidate in all_candidates(workload, privacy):
            spent = sum(Fraction(g.budget) for g in candidate.group_budgets())
            assert spent <= spec, (candidate.name, float(spent - spec))
