"""Marginal workloads at ResidualPlanner's scale (thousands of marginals over domains of 10^18–10^30
cells): the SVD bound by Kronecker structure equals its closed form, the zCDP plan reaches it, and the
noisy answers have the variances the plan states."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner import Domain, Plan, Privacy, Workload, plan
from planner.recovery import subsets


def kway_bound(attributes: int, size: int, k: int, rho: float) -> float:
    """All k-way marginals over ``attributes`` attributes of ``size`` values: on the eigen-class of the
    ``j`` attributes away from the constant vector, ``WᵀW`` is ``C(d−j, k−j)·m^{d−k}`` with multiplicity
    ``(m−1)^j``, so ``Σσ = m^{(d−k)/2} Σ_j C(d, j)(m−1)^j √C(d−j, k−j)`` and the zCDP bound
    ``(Σσ)²/(2ρ m^d)`` is ``(Σ_j C(d, j)(m−1)^j √C(d−j, k−j))² / (2ρ m^k)``."""
    total = sum(math.comb(attributes, j) * (size - 1) ** j * math.sqrt(math.comb(attributes - j, k - j)) for j in range(k + 1))
    return total**2 / (2 * rho * size**k)


CASES = [(100, 2, 2), (30, 4, 3)]  # 4,950 marginals on 2^100 cells; 4,060 marginals on 4^30 cells
RHO = 0.5


@pytest.fixture(scope="module", params=CASES, ids=["2-way, 100 binary", "3-way, 30 of size 4"])
def planned(request: pytest.FixtureRequest) -> tuple[tuple[int, int, int], Workload, Plan]:
    attributes, size, k = request.param
    workload = Workload.all_kway(Domain({f"x{i:03d}": size for i in range(attributes)}), k)
    return request.param, workload, plan(workload, Privacy.zcdp(RHO))


def test_zcdp_plan_of_all_kway_marginals_reaches_the_closed_form_bound(planned) -> None:
    (attributes, size, k), _, chosen = planned
    bound = kway_bound(attributes, size, k, RHO)
    assert chosen.svd_bound() == pytest.approx(bound, rel=1e-10)
    assert chosen.strategy_name in ("residual", "fourier")  # the same rows on binary attributes
    assert chosen.candidate.expected_error(continuous=True) == pytest.approx(bound, rel=1e-9)
    assert 1 <= chosen.ratio < 1 + 1e-6  # discrete noise: σ² rounded up to 21 significant bits


def test_answers_at_scale_are_exact_without_noise_and_have_the_stated_variances(planned) -> None:
    """Cell variances of marginal ``A`` are ``Σ_{T⊆A} V_T Π_{a∈T}(1 − 1/m) / m^{2|A∖T|}`` (``V_T``: the
    variance of each orthonormal coefficient of ``T``); the noisy coefficient estimates, independent,
    are standard normal-ish once scaled by their stated deviations."""
    (attributes, size, k), workload, chosen = planned
    domain = workload.domain
    rows = np.random.default_rng(8).integers(0, size, size=(5_000, attributes))
    marginals = {}
    for m in chosen.required_marginals():
        cells = np.ravel_multi_index([rows[:, domain.index(a)] for a in m], domain.shape(m))
        marginals[m] = np.bincount(cells, minlength=size ** len(m)).reshape(domain.shape(m))
    exact = chosen.answer(chosen.measure(marginals, noise=False))
    for product, values in zip(workload.products, exact.values):
        np.testing.assert_allclose(values, marginals[product.attributes].ravel(), atol=1e-6)
    candidate = chosen.candidate
    continuous = candidate.coefficient_variances(continuous=True)  # σ_T², the same for every coefficient of T
    coefficient = {t: float(v.flat[0]) for t, v in continuous.items()}
    closed = [
        sum(coefficient[t] * (1 - 1 / size) ** len(t) / size ** (2 * (k - len(t))) for t in subsets(p.attributes))
        for p in workload.products
    ]
    stated = candidate.query_variances_for(continuous=True)
    np.testing.assert_allclose([v.max() for v in stated], closed, rtol=1e-12)
    np.testing.assert_allclose([v.min() for v in stated], closed, rtol=1e-12)
    np.testing.assert_allclose(np.concatenate(exact.variances), np.concatenate(stated), rtol=1e-6)  # σ² rounded up
    variance = candidate.exact_coefficient_variances
    noisy, truth = candidate.residuals(chosen.measure(marginals, rng=9)), candidate.residuals(chosen.measure(marginals, noise=False))
    scaled = np.concatenate([((noisy[t] - truth[t]) / np.sqrt(variance[t])).ravel() for t in candidate.needed])
    assert scaled.size > 5000
    band = 5 * math.sqrt(2 / scaled.size)  # the mean of squares of independent unit-variance values
    assert abs(float(np.mean(scaled**2)) - 1) < band
    assert abs(float(np.mean(scaled))) < 5 / math.sqrt(scaled.size)


def test_pure_dp_plan_over_more_attributes_than_coverings_search() -> None:
    """Coverings use one int64 bit per attribute: past 62 attributes they are not searched (they used
    to overflow), the other families still plan."""
    from planner.strategies.marginals import COVERING_MAX_UNION, coverings

    domain = Domain({f"x{i:03d}": 2 for i in range(COVERING_MAX_UNION + 1)})
    workload = Workload.all_kway(domain, 2)
    assert coverings(workload) == []
    chosen = plan(workload, Privacy.laplace(1.0))
    assert chosen.strategy_name in ("fourier", "marginals") and math.isfinite(chosen.expected_error())
