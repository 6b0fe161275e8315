"""The lower bound EXPLAIN and ``Plan.explain`` report (docs/math.md §7) holds for the discrete noise the
plans really add: no plan's expected error falls below it, at any ε or ρ, for every strategy family.

The bound it replaces — Li & Miklau's SVD bound for continuous noise, still ``Plan.svd_bound()`` — is
not a lower bound for discrete noise: a discrete Laplace of scale b has variance 1/(2 sinh²(1/(2b))) <
2b², so an identity plan at ε = 5 sat at 0.17 × that bound. The sweep asserts both facts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner import Domain, Privacy, Workload, plan
from planner import noise

SMALL = Domain({"a": 3, "b": 4, "c": 2}, ordered={"b"})
ORDERED = Domain({"x": 24, "s": 2}, ordered={"x"})
GRID = Domain({"x": 8, "y": 8}, ordered={"x", "y"})
BINARY = Domain({f"v{i}": 2 for i in range(6)})

WORKLOADS = {
    "total": Workload.total(SMALL),
    "identity": Workload.identity(SMALL),
    "2-way marginals": Workload.all_kway(SMALL, 2),
    "cube": Workload.all_kway(SMALL, 0) + Workload.all_kway(SMALL, 1) + Workload.all_kway(SMALL, 2) + Workload.all_kway(SMALL, 3),
    "binary 3-way": Workload.all_kway(BINARY, 3),
    "all ranges": Workload.all_range(ORDERED, "x"),
    "prefixes + marginal": Workload.prefix(ORDERED, "x") + Workload.marginals(ORDERED, [("s",)], weight=3.0),
    "2-D ranges": Workload.all_range(GRID, "x") + Workload.all_range(GRID, "y"),
}
PRIVACY = [Privacy.laplace(e) for e in (0.1, 1.0, 5.0, 30.0)] + [Privacy.zcdp(r) for r in (0.01, 1.0, 20.0)]


def test_no_plan_goes_below_the_lower_bound_and_plans_went_below_the_old_one() -> None:
    below_old, strategies = [], set()
    for name, workload in WORKLOADS.items():
        for privacy in PRIVACY:
            for contributions, distinct in ((1, False), (3, True)):
                chosen = plan(workload, privacy, contributions=contributions, distinct_cells=distinct)
                strategies.add(chosen.strategy_name.split("(")[0])
                assert chosen.ratio is not None, (name, privacy)
                assert chosen.ratio >= 1 - 1e-9, (name, str(privacy), contributions, distinct, chosen.strategy_name, chosen.ratio)
                assert chosen.lower_bound() <= chosen.svd_bound()
                if chosen.expected_error() < chosen.svd_bound():
                    below_old.append((name, str(privacy)))
    assert len(below_old) >= 10  # the old bound was crossed by many of these plans (identity at ε = 5: 0.17)
    assert len(strategies) >= 4, strategies  # the sweep reaches several families, ridge pairs among them
    assert any("ridge" in s for s in strategies), strategies


@pytest.mark.parametrize("privacy", [Privacy.laplace(0.5), Privacy.laplace(5.0), Privacy.zcdp(0.05), Privacy.zcdp(8.0)], ids=str)
def test_one_measured_total_meets_the_bound(privacy: Privacy) -> None:
    """A total is one row of magnitude 1 with the whole budget: its error is the bound (ratio 1)."""
    chosen = plan(Workload.total(Domain({"a": 5})), privacy, contributions=2)
    assert chosen.ratio == pytest.approx(1.0, rel=1e-5)  # up to the parameter's rounding up (21 bits)
    if privacy.is_laplace:
        assert chosen.lower_bound() == pytest.approx(1 / (2 * math.sinh(privacy.epsilon / 4) ** 2))  # b = k/ε, k = 2
    if privacy == Privacy.laplace(5.0):  # the old "ratio" of the same total with one row per unit
        alone = plan(Workload.total(Domain({"a": 5})), privacy)
        assert alone.expected_error() / alone.svd_bound() == pytest.approx(0.1707, abs=1e-4) and alone.ratio == pytest.approx(1.0, rel=1e-5)


def test_a_ridge_pair_carries_no_more_information_per_unit_of_l1_than_two_laplace_rows() -> None:
    """The step of the bound's proof for ridge pairs (docs/math.md §7): for a pair of scale b and half-width h,
    1/Var(Y₁+Y₂) + 1/Var(Y₁−Y₂) ≤ 1/Var(discrete Laplace of scale b)."""
    for scale in np.geomspace(0.05, 500.0, 40):
        single = noise.discrete_laplace_variance(scale)
        most = math.floor(noise.MAX_RIDGE_WIDTH * noise.laplace_scale_used(scale) / 2)
        for half_width in sorted({0, min(1, most), most // 3, most // 2, most}):
            total, difference = noise.discrete_ridge_variances(scale, half_width)
            assert (1 / total + 1 / difference) * single <= 1 + 1e-12
