"""plan(progress=...) reports each strategy family as it is priced and plans exactly as without it."""

from __future__ import annotations

from planner import Domain, Privacy, Workload, plan


def test_plan_reports_families_and_chooses_the_same_plan() -> None:
    domain = Domain({"a": 4, "b": 3, "c": 8}, ordered={"c"})
    workload = Workload.marginals(domain, [("a", "b"), ("c",)])
    seen: list[tuple[int, int]] = []
    reported = plan(workload, Privacy.laplace(1.0), contributions=2, progress=lambda done, total: seen.append((done, total)))
    total = seen[0][1]
    assert total >= 8 and seen == [(done, total) for done in range(1, total + 1)]
    silent = plan(workload, Privacy.laplace(1.0), contributions=2)
    assert (reported.strategy_name, reported.expected_error()) == (silent.strategy_name, silent.expected_error())
