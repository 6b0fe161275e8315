"""Strategy families: budget optimisation, coverings, accuracy against the SVD bound, non-negativity."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner import Domain, Privacy, Workload, plan
from planner.budget import Sensitivity
from planner.recovery import downward_closure
from planner.strategies.marginals import BudgetProblem, coverings, incidence
from planner.recovery import CHANGE_TOLERANCE

ADULT = Domain(
    {"workclass": 9, "education": 16, "marital": 7, "occupation": 15, "relationship": 6, "race": 5, "sex": 2, "income": 2}
)
BINARY16 = Domain({f"x{i:02d}": 2 for i in range(16)})


def test_gaussian_alternation_reaches_the_convex_optimum() -> None:
    """zCDP budgets of a marginal set: alternation ends where cvxpy's joint convex program does."""
    import cvxpy as cp

    dom = Domain({"a": 3, "b": 4, "c": 5})
    workload = Workload.all_kway(dom, 2) + 3.0 * Workload.marginals(dom, [("a",), ()])
    privacy = Privacy.zcdp(0.7)
    problem = BudgetProblem(workload, privacy, Sensitivity())
    measured = list(downward_closure(p.attributes for p in workload.products))
    _, _, alternated = problem.solve(measured)
    coverage = incidence(problem.relevant, measured, workload).toarray()
    rho = cp.Variable(len(measured), nonneg=True)
    objective = cp.sum(cp.multiply(problem.mass, cp.inv_pos(coverage @ (2 * rho))))
    cp.Problem(cp.Minimize(objective), [cp.sum(rho) == privacy.rho]).solve()
    assert alternated == pytest.approx(objective.value, rel=1e-5)
    assert alternated >= objective.value * (1 - 1e-6)


def test_alternation_never_increases_the_error() -> None:
    dom = Domain({"a": 3, "b": 4, "c": 5, "d": 2})
    workload = Workload.all_kway(dom, 2)
    problem = BudgetProblem(workload, Privacy.laplace(1.0), Sensitivity())
    measured = list(downward_closure(p.attributes for p in workload.products))
    errors = [problem.solve(measured, iterations=n)[2] for n in (1, 2, 5, 20, 100)]
    assert all(later <= earlier * (1 + 1e-12) for earlier, later in zip(errors, errors[1:]))
    assert errors[-1] < errors[0]


def test_coverings_cover_the_workload_within_their_limits() -> None:
    workload = Workload.all_kway(BINARY16, 2)
    found = coverings(workload)
    assert found
    pairs = set(itertools.combinations(BINARY16.attributes, 2))
    for blocks in found:
        covered = {pair for block in blocks for pair in itertools.combinations(block, 2)}
        assert pairs <= covered
        assert all(len(block) <= 8 for block in blocks)
    assert min(len(blocks) for blocks in found) < len(pairs)


@pytest.mark.parametrize(
    "workload,privacy,limit",
    [
        (Workload.all_kway(ADULT, 2), Privacy.zcdp(1.0), 1.02),
        (Workload.all_kway(ADULT, 2), Privacy.laplace(1.0), 21.0),
        (Workload.all_kway(BINARY16, 2), Privacy.zcdp(1.0), 1.02),
        (Workload.all_kway(BINARY16, 2), Privacy.laplace(1.0), 68.0),
    ],
    ids=["adult-2way-zcdp", "adult-2way-laplace", "binary-2way-zcdp", "binary-2way-laplace"],
)
def test_accuracy_targets_against_the_svd_bound(workload: Workload, privacy: Privacy, limit: float) -> None:
    chosen = plan(workload, privacy)
    assert chosen.svd_ratio <= limit  # the papers' yardstick (continuous noise)
    assert chosen.ratio >= 1  # the bound for the discrete noise really added
    # the SVD bound is a lower bound (continuous noise; discrete noise is slightly less variable)
    assert chosen.candidate.expected_error(continuous=True) >= chosen.svd_bound() * (1 - 1e-9)


def test_residual_strategy_is_exactly_optimal_for_marginals() -> None:
    dom = Domain({"a": 3, "b": 7, "c": 5, "d": 2})
    chosen = plan(Workload.all_kway(dom, 2) + Workload.all_kway(dom, 3), Privacy.zcdp(1.0))
    assert chosen.strategy_name == "residual"
    assert chosen.candidate.expected_error(continuous=True) == pytest.approx(chosen.svd_bound(), rel=1e-9)


def _data(dom: Domain, seed: int, scale: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, scale, size=dom.sizes)


def _feed(chosen, dom: Domain, data: np.ndarray) -> dict:
    return {m: data.sum(axis=tuple(i for i, a in enumerate(dom.attributes) if a not in m)) for m in chosen.required_marginals()}


@pytest.mark.parametrize("privacy", [Privacy.zcdp(0.1), Privacy.laplace(0.5)])
def test_nonnegative_answers_are_nonnegative_consistent_and_reported(privacy: Privacy) -> None:
    dom = Domain({"a": 3, "b": 4, "c": 5})
    data = np.zeros(dom.sizes, dtype=int)
    data[0, 0, 0], data[2, 1, 4] = 3, 1  # sparse: GLS answers go negative
    workload = Workload.all_kway(dom, 2)
    chosen = plan(workload, privacy)
    measurement = chosen.measure(_feed(chosen, dom, data), rng=3)
    answers, report = chosen.answer_nonnegative(measurement)
    gls = chosen.answer(measurement)
    assert report.negative_before == sum(int((v < -CHANGE_TOLERANCE).sum()) for v in gls.values) > 0
    assert report.changed > 0 and report.largest_change > 0
    assert min(v.min() for v in answers.values) >= -1e-9
    tables = [v.reshape(dom.shape(p.attributes)) for v, p in zip(answers.values, workload.products)]
    np.testing.assert_allclose(tables[0].sum(axis=1), tables[1].sum(axis=1), atol=1e-6)  # (a,b)→a = (a,c)→a
    np.testing.assert_allclose(tables[0].sum(axis=0), tables[2].sum(axis=1), atol=1e-6)  # (a,b)→b = (b,c)→b
    assert "negative" in str(report)


def test_nonnegative_answers_change_nothing_when_gls_is_already_positive() -> None:
    dom = Domain({"a": 3, "b": 4})
    data = _data(dom, 1, 1000) + 1000
    chosen = plan(Workload.all_kway(dom, 1), Privacy.zcdp(1.0))
    measurement = chosen.measure(_feed(chosen, dom, data), rng=1)
    answers, report = chosen.answer_nonnegative(measurement)
    assert report.negative_before == 0 and report.changed == 0
    for got, want in zip(answers.values, chosen.answer(measurement).values):
        np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("sizes", [(2, 2, 2, 2, 2), (2, 3, 2, 2)], ids=["binary", "one ternary"])
def test_a_fourier_measurement_of_binary_attributes_is_kept_and_answers_alike_from_the_store(sizes: tuple[int, ...]) -> None:
    """On two cells the Fourier (Hadamard) basis is the Helmert basis: a Fourier measurement of binary attributes is
    kept as residual estimates, and the store answers the workload with the candidate's own GLS values and variances.
    An attribute of three cells pads to four: another basis, nothing kept."""
    from planner.store import MeasurementStore
    from planner.strategies.fourier import fourier_candidate

    domain = Domain({f"a{i}": n for i, n in enumerate(sizes)})
    workload = Workload.marginals(domain, itertools.combinations(domain.attributes, 2))
    candidate = fourier_candidate(workload, Privacy.laplace(1.0), Sensitivity(1))
    rng = np.random.default_rng(5)
    data = rng.integers(0, 50, size=domain.shape(domain.attributes))
    required = {m: data.sum(axis=tuple(i for i, a in enumerate(domain.attributes) if a not in m)) for m in candidate.required_marginals()}
    measurement = candidate.measure(required, rng=rng)
    kept = candidate.kept_estimates(measurement)
    if set(sizes) != {2}:
        assert kept is None
        return
    store = MeasurementStore()
    store.record("rows", kept)
    assert all(store.covered("rows", workload))
    own = candidate.answer(measurement)
    stored = store.answer("rows", workload, range(len(workload.products)))
    for index in range(len(workload.products)):
        np.testing.assert_allclose(stored[index][0], own.values[index], rtol=1e-9, atol=1e-6)
        np.testing.assert_allclose(stored[index][1], own.variances[index], rtol=1e-9)
