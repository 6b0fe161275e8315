"""EXPLAIN <statement or batch>: rows with the strategy, budgets per group, expected RMSE per query,
the lower bound and its ratio, and the cost — reading no data and charging nothing."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import dpsql
import dpsql.testing
from conftest import ADULT_SCHEMA, make_adult
from pipeline_helpers import prepare

CUBE = "SELECT sex, race, COUNT(*) FROM adult GROUP BY CUBE (sex, race)"


def _no_reads(connection: dpsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(sql: str) -> None:
        raise AssertionError(f"EXPLAIN read data: {sql}")

    monkeypatch.setattr(connection._session.backend, "run", refuse)


def test_explain_rows_describe_the_plan_and_charge_nothing(adult_connection: dpsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = prepare(adult_connection, [CUBE], epsilon=0.8).plan
    _no_reads(adult_connection, monkeypatch)
    before = adult_connection.budget_spent()
    cursor = adult_connection.cursor().execute("EXPLAIN " + CUBE, epsilon=0.8)
    assert [d[0] for d in cursor.description] == ["section", "name", "value", "detail"]
    rows = cursor.fetchall()
    by_section: dict[str, list[tuple]] = {}
    for row in rows:
        by_section.setdefault(row[0], []).append(row)
    assert by_section["cost"] == [("cost", "epsilon", 0.8, "charged once when executed")]
    assert by_section["strategy"][0][1] == plan.strategy_name
    budgets = [r[2] for r in by_section["group"]]
    assert sum(budgets) == pytest.approx(0.8) and len(budgets) == len(plan.group_budgets())
    queries = by_section["query"]
    assert [q[1] for q in queries] == ["1: (sex, race)", "1: (sex)", "1: (race)", "1: ()"]
    for query, variances in zip(queries, plan.query_variances()):
        assert query[2] == pytest.approx(float(np.sqrt(variances.max())))
    errors = {r[1]: r[2] for r in by_section["error"]}
    assert errors["expected total squared error"] == pytest.approx(plan.expected_error())
    assert errors["lower bound"] == pytest.approx(plan.lower_bound())
    assert errors["ratio to lower bound"] == pytest.approx(plan.expected_error() / plan.lower_bound())
    assert errors["ratio to lower bound"] >= 1 - 1e-9
    assert adult_connection.budget_spent() == before
    assert "strategy: " + plan.strategy_name in cursor.explanation


def test_explained_rmse_is_the_released_error(adult_connection: dpsql.Connection) -> None:
    explained = adult_connection.cursor().execute("EXPLAIN " + CUBE, epsilon=0.8).fetchall()
    total_rmse = [r[2] for r in explained if r[0] == "query" and r[1] == "1: ()"][0]
    cursor = adult_connection.cursor().execute(CUBE, epsilon=0.8)
    assert cursor.errors[-1][2] == pytest.approx(total_rmse, rel=1e-9)  # released numbers: 10 significant digits


def test_explanation_of_a_filtered_total_has_its_lower_bound(adult_connection: dpsql.Connection) -> None:
    """COUNT(*) with its WHERE applied in SQL is planned over a domain with no attributes (one cell)."""
    cursor = adult_connection.cursor().execute("SELECT COUNT(*) FROM adult WHERE age > 30", epsilon=1.0)
    assert "unavailable" not in cursor.explanation
    # (Σσ)²/n times the discrete Laplace variance at b = k/ε, with k = 3 rows per unit, σ = n = 1
    bound = 1 / (2 * np.sinh(1.0 / 6) ** 2)
    assert f"error: lower bound = {bound:.6g} " in cursor.explanation
    assert "error: ratio to lower bound = 1 " in cursor.explanation  # one row with the whole budget: optimal


def test_explain_of_a_batch(adult_connection: dpsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_reads(adult_connection, monkeypatch)
    before = adult_connection.budget_spent()
    text = "EXPLAIN SELECT sex, COUNT(*) FROM adult GROUP BY sex; SELECT job, COUNT(*) FROM adult GROUP BY ROLLUP (job)"
    rows = adult_connection.cursor().execute(text, epsilon=1.0).fetchall()
    statements = [r for r in rows if r[0] == "statement"]
    assert [r[1] for r in statements] == ["1", "2"]
    assert [r[1] for r in rows if r[0] == "query"] == ["1: (sex)", "2: (job)", "2: ()"]
    (from_workload,) = adult_connection.workload(
        ["SELECT sex, COUNT(*) FROM adult GROUP BY sex", "SELECT job, COUNT(*) FROM adult GROUP BY ROLLUP (job)"],
        epsilon=1.0,
        explain=True,
    )
    assert [r[:3] for r in from_workload.rows if r[0] != "statement"] == [r[:3] for r in rows if r[0] != "statement"]
    assert adult_connection.budget_spent() == before


def test_explain_of_statements_needing_no_data(adult_connection: dpsql.Connection) -> None:
    rows = adult_connection.cursor().execute("EXPLAIN SELECT COUNT(*) FROM adult WHERE age > 200", epsilon=1.0).fetchall()
    assert ("cost", "epsilon", 0.0, "every count is zero by construction: nothing is read or charged") in rows


def test_explain_errors(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    with pytest.raises(dpsql.ProgrammingError, match="EXPLAIN needs a statement"):
        cursor.execute("EXPLAIN", epsilon=1.0)
    with pytest.raises(dpsql.ProgrammingError, match="EXPLAIN ANALYZE"):
        cursor.execute("EXPLAIN ANALYZE SELECT COUNT(*) FROM adult", epsilon=1.0)
    with pytest.raises(dpsql.ProgrammingError, match="unknown column"):
        cursor.execute("EXPLAIN SELECT colour, COUNT(*) FROM adult GROUP BY CUBE (colour)", epsilon=1.0)
    assert adult_connection.budget_spent().statements == 0


def test_explain_without_a_cost_shows_the_plan_in_units_of_one(adult_connection: dpsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """No epsilon=: the plan at ε = 1, said so; the same plan (strategy, groups, budgets) as at ε = 1."""
    _no_reads(adult_connection, monkeypatch)
    rows = adult_connection.cursor().execute("EXPLAIN " + CUBE).fetchall()
    assert ("cost", "not given", None, "shown for epsilon = 1: expected variances scale as 1/ε²") in rows
    at_one = adult_connection.cursor().execute("EXPLAIN " + CUBE, epsilon=1.0).fetchall()
    assert [r for r in rows if r[0] in ("strategy", "group", "query", "error")] == [
        r for r in at_one if r[0] in ("strategy", "group", "query", "error")
    ]
    assert "cost: not given" in adult_connection.explain(CUBE)
    with pytest.raises(dpsql.ProgrammingError, match="no privacy cost"):
        adult_connection.cursor().execute(CUBE)


EXPLAINED = [
    "SELECT sex, COUNT(*) FROM adult GROUP BY sex",
    CUBE,
    "SELECT COUNT(*) FROM adult WHERE age BETWEEN 30 AND 40",
    "SELECT age, COUNT(*) FROM adult GROUP BY age",
    "SELECT job, SUM(age), AVG(age) FROM adult GROUP BY job",
    "SELECT sex, MEDIAN(age) FROM adult GROUP BY sex",
    "SELECT COUNT(DISTINCT person_id) FROM adult",
]


@pytest.mark.parametrize("cost", [{"epsilon": 0.5}, {"epsilon": 5.0}, {"epsilon": 40.0}, {"rho": 0.5}, {"rho": 30.0}], ids=str)
def test_explain_never_shows_a_ratio_below_one_and_keeps_every_detail_short(adult_connection: dpsql.Connection, cost: dict) -> None:
    """The bound EXPLAIN shows holds for the discrete noise the plan adds (docs/math.md §7): the old SVD
    bound for continuous noise was crossed by every identity plan (0.17 at ε = 5, k = 1; here k = 3). Every
    detail fits one short line, and the glossary's address comes last."""
    if "rho" in cost:
        adult_connection = dpsql.connect(budget=dpsql.Budget(epsilon=1000.0, delta=1e-6), noise="gaussian")
        adult_connection.register("adult", make_adult(), schema=ADULT_SCHEMA)
    for statement in EXPLAINED:
        rows = adult_connection.cursor().execute("EXPLAIN " + statement, **cost).fetchall()
        errors = {r[1]: r[2] for r in rows if r[0] == "error"}
        assert errors["ratio to lower bound"] >= 1 - 1e-9, (statement, cost)
        assert errors["lower bound"] <= errors["expected total squared error"] * (1 + 1e-9)
        assert max(len(r[3] or "") for r in rows if r[0] != "statement") <= 160, statement
        assert rows[-1] == ("glossary", "docs/glossary.md", None, "what every section and term above means")


def test_every_glossary_link_explain_prints_has_its_entry(adult_connection: dpsql.Connection) -> None:
    """EXPLAIN's details link to docs/glossary.md#anchor; each anchor is a heading there, and every
    section EXPLAIN prints has an entry (so a newcomer finds every term where EXPLAIN points)."""
    glossary = (Path(__file__).parents[2] / "docs" / "glossary.md").read_text(encoding="utf-8")
    anchors = {re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-") for line in glossary.splitlines() if line.startswith("#")}
    linked, sections = set(), set()
    selecting = ["SELECT browser, COUNT(*) FROM adult GROUP BY browser", "SELECT browser, COUNT(browser) FROM adult GROUP BY browser"]
    for statement in EXPLAINED + selecting + ["SELECT age // 10 AS decade, COUNT(*) FROM adult GROUP BY decade"]:
        rows = adult_connection.cursor().execute("EXPLAIN " + statement, epsilon=1.0).fetchall()
        linked |= {m for r in rows for m in re.findall(r"docs/glossary\.md#([a-z0-9-]+)", r[3] or "")}
        sections |= {r[0] for r in rows}
    assert {"rows-per-unit", "groups-per-unit", "aggregate", "quantile", "lower-bound", "derived-column"} <= linked
    assert linked <= anchors, linked - anchors
    assert {"keys", "selection", "split"} <= sections and sections - {"glossary"} <= anchors, sections - anchors
    for term in ("epsilon", "rho", "gls", "ridge-pairs", "strategy", "group"):
        assert term in anchors
    for word in ("share of epsilon", "p-identity+ridge(p=…)", "identity (summed)", "composite(", "hierarchy(b=…)"):
        assert word in glossary


def test_an_optimal_plan_shows_a_ratio_of_one_and_figures_without_residue(adult_connection: dpsql.Connection) -> None:
    """The identity plan of a full marginal meets the lower bound: its ratio showed as 0.9999999999999998
    (below 1, which EXPLAIN promises never to show) and the bound with 17 digits."""
    rows = adult_connection.execute("EXPLAIN SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race", epsilon=1.0).fetchall()
    figures = {name: value for section, name, value, _ in rows if section == "error"}
    assert figures["ratio to lower bound"] == 1.0
    for _, name, value, _ in rows:
        if isinstance(value, float):
            assert len(repr(value)) <= 12 or "e" in repr(value), (name, value)
