"""COUNT(DISTINCT <privacy unit>) (dpsql/sql/distinct_units.py, docs/math.md §14): exact answers with the
noise off, the max_groups_per_unit bound, closed-form variances, EXPLAIN, and the refused forms."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd
import pytest
from pipeline_helpers import prepare

import dpsql
import dpsql.testing
from planner.noise import discrete_laplace_variance

STATES = ["AK", "CA", "NY", "TX", "WA"]


def visits(persons: int = 400, seed: int = 3) -> pd.DataFrame:
    """1-8 visits per person, each to a random state; every value inside the schema's domains."""
    rng = np.random.default_rng(seed)
    per_person = rng.integers(1, 9, size=persons)
    n = int(per_person.sum())
    return pd.DataFrame({
        "person_id": np.repeat(np.arange(persons), per_person),
        "state": rng.choice(STATES, size=n),
        "sex": rng.choice(["F", "M"], size=n),
        "age": rng.integers(18, 80, size=n),
    })


def schema(max_groups: int, max_rows: int = 8) -> dict[str, object]:
    return {
        "privacy_unit": "person_id",
        "max_rows_per_unit": max_rows,
        "max_groups_per_unit": max_groups,
        "columns": {"state": {"categories": STATES}, "sex": {"categories": ["F", "M"]}, "age": {"range": [18, 79]}},
    }


def connect(frame: pd.DataFrame, table_schema: dict[str, object], **options: object) -> dpsql.Connection:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1000.0, delta=1e-6), **options)  # type: ignore[arg-type]
    connection.register("visits", frame, schema=table_schema)
    return connection


def exact(cursor: dpsql.Cursor, sql: str) -> list[tuple[object, ...]]:
    with dpsql.testing.noise_disabled():
        cursor.execute(sql, epsilon=1.0)
        return cursor.fetchall()


@pytest.mark.parametrize("sql, duck", [
    ("SELECT state, COUNT(DISTINCT person_id) AS n FROM visits GROUP BY state",
     "SELECT state, COUNT(DISTINCT person_id) FROM frame GROUP BY state ORDER BY state"),
    ("SELECT state, sex, COUNT(DISTINCT person_id) FROM visits WHERE age >= 40 GROUP BY state, sex",
     "SELECT state, sex, COUNT(DISTINCT person_id) FROM frame WHERE age >= 40 GROUP BY state, sex ORDER BY state, sex"),
    ("SELECT COUNT(DISTINCT visits.person_id) FROM visits WHERE state IN ('CA', 'NY')",
     "SELECT COUNT(DISTINCT person_id) FROM frame WHERE state IN ('CA', 'NY')"),
])
def test_equals_duckdb_when_no_unit_exceeds_the_bounds(sql: str, duck: str) -> None:
    frame = visits()
    connection = connect(frame, schema(max_groups=10))  # 5 states x 2 sexes: no unit is cut
    expected = duckdb.sql(duck).fetchall()
    released = exact(connection.cursor(), sql)
    assert [tuple(r[:-1]) for r in released] == [tuple(r[:-1]) for r in expected]
    assert [r[-1] for r in released] == pytest.approx([r[-1] for r in expected], abs=1e-9)
    connection.close()


def test_equals_duckdb_on_the_kept_pairs_of_the_salted_order() -> None:
    """With k = 2 of 5 states, each unit's kept states follow the table's salted order: DuckDB's exact
    COUNT(DISTINCT) over those pairs, written out here from the rule (docs/math.md §14)."""
    frame = visits()
    connection = connect(frame, schema(max_groups=2))
    released = exact(connection.cursor(), "SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state")
    salt = connection._session.table("visits").salt
    expected = duckdb.sql(
        "SELECT state, COUNT(DISTINCT person_id) FROM (SELECT person_id, state, ROW_NUMBER() OVER (PARTITION BY person_id "
        f"ORDER BY HASH(HASH(person_id, state, {salt})), state) AS r FROM (SELECT DISTINCT person_id, state FROM frame)) "
        "WHERE r <= 2 GROUP BY state ORDER BY state"
    ).fetchall()
    assert [s for s, _ in released] == [s for s, _ in expected]
    assert [n for _, n in released] == pytest.approx([n for _, n in expected], abs=1e-9)
    per_unit = frame.groupby("person_id")["state"].nunique()
    assert sum(n for _, n in released) == pytest.approx(int(np.minimum(per_unit, 2).sum()))  # each unit counted min(k, its states) times
    raw = dict(duckdb.sql("SELECT state, COUNT(DISTINCT person_id) FROM frame GROUP BY state").fetchall())
    assert all(n <= raw[s] + 1e-9 for s, n in released) and any(n < raw[s] - 0.5 for s, n in released)
    connection.close()


def test_a_unit_in_ten_groups_counts_in_at_most_k() -> None:
    ages = list(range(18, 28))
    lonely = pd.DataFrame({"person_id": 0, "state": "CA", "sex": "F", "age": ages})  # unit 0: ten age groups
    others = pd.DataFrame({"person_id": np.arange(1, 31), "state": "NY", "sex": "M", "age": np.resize(ages, 30)})
    frame = pd.concat([lonely, others], ignore_index=True)
    connection = connect(frame, schema(max_groups=2, max_rows=10))
    released = exact(connection.cursor(), "SELECT age, COUNT(DISTINCT person_id) AS n FROM visits WHERE age < 28 GROUP BY age")
    assert sum(n for _, n in released) == pytest.approx(30 + 2)
    assert [a for a, _ in released] == ages  # the ages the WHERE clause excludes are not rows
    extra = sorted(n - 3 for a, n in released if a < 28)  # 3 other units per age; unit 0 in exactly 2 of its 10 ages
    assert extra == pytest.approx([0] * 8 + [1, 1], abs=1e-9)
    assert exact(connection.cursor(), "SELECT COUNT(DISTINCT person_id) FROM visits")[0][0] == pytest.approx(31)  # the total: once each
    connection.close()


def test_max_rows_per_unit_also_bounds_the_groups() -> None:
    """Distinct units are counted on the bounded rows: a unit with one kept row is in one group, and the
    sensitivity is min(max_groups_per_unit, max_rows_per_unit, cells)."""
    frame = visits()
    connection = connect(frame, schema(max_groups=4, max_rows=1))
    released = exact(connection.cursor(), "SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state")
    assert sum(n for _, n in released) == pytest.approx(frame.person_id.nunique())
    cursor = connection.cursor()
    cursor.execute("EXPLAIN SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state", epsilon=1.0)
    assert ("bounding", "groups per unit", 1.0) in [r[:3] for r in cursor.fetchall()]
    connection.close()


@pytest.mark.parametrize("groups, sql, k", [
    (3, "SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state", 3),
    (3, "SELECT sex, COUNT(DISTINCT person_id) FROM visits GROUP BY sex", 2),  # only two cells
    (3, "SELECT COUNT(DISTINCT person_id) FROM visits", 1),  # one cell: each unit once
])
def test_laplace_variance_is_that_of_sensitivity_k(groups: int, sql: str, k: int) -> None:
    connection = connect(visits(), schema(max_groups=groups))
    cursor = connection.cursor()
    cursor.execute("EXPLAIN " + sql, epsilon=0.5)
    rows = cursor.fetchall()
    bound = next(r for r in rows if r[:2] == ("bounding", "groups per unit"))
    assert bound[2] == k and f"L1 sensitivity {k}, L2 sensitivity √{k}" in bound[3]
    assert next(r for r in rows if r[0] == "strategy")[3].endswith(f"{k} (unit, group) pair(s) per privacy unit")  # one per group a unit is in, not its rows
    assert connection.budget_spent().epsilon == 0
    cursor.execute(sql, epsilon=0.5)
    variance = discrete_laplace_variance(k / 0.5)
    assert [e[-1] for e in cursor.errors] == pytest.approx([math.sqrt(variance)] * len(cursor.errors), rel=1e-9)  # released: 10 digits
    assert connection.budget_spent().epsilon == pytest.approx(0.5)
    connection.close()


def test_gaussian_variance_uses_the_l2_bound_sqrt_k() -> None:
    """Under zCDP a unit's k pairs lie in k distinct cells: σ² = k/(2ρ), not k²/(2ρ)."""
    connection = connect(visits(), schema(max_groups=4), noise="gaussian")
    cursor = connection.cursor()
    cursor.execute("SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state", rho=0.05)
    assert [e[-1] for e in cursor.errors] == pytest.approx([math.sqrt(4 / (2 * 0.05))] * 5, rel=1e-9)
    connection.close()


def test_empirical_variance_matches_the_plan() -> None:
    """300 seeded releases of five cells at ε = 1, k = 2: the noise's sample variance is within 15 % of the
    closed form (about 2.6 standard errors of the estimate for discrete Laplace noise)."""
    frame = visits()
    connection = connect(frame, schema(max_groups=2), reuse=False)
    cursor = connection.cursor()
    sql = "SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state"
    truth = np.array([n for _, n in exact(cursor, sql)])
    releases = []
    with dpsql.testing.seeded(11):
        for _ in range(300):
            cursor.execute(sql, epsilon=1.0)
            releases.append([n for _, n in cursor.fetchall()])
    noise = np.array(releases) - truth
    expected = discrete_laplace_variance(2.0)
    assert abs(noise.mean()) < 4 * math.sqrt(expected / noise.size)
    assert noise.var() == pytest.approx(expected, rel=0.15)
    connection.close()


def test_repeated_statement_is_answered_from_its_own_kept_measurement_only() -> None:
    """Kept measurements of pairs answer the same distinct count again (free), never COUNT(*) nor a
    distinct count over other groups (their data vectors differ)."""
    connection = connect(visits(), schema(max_groups=2))
    cursor = connection.cursor()
    cursor.execute("SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state", epsilon=1.0)
    first = cursor.fetchall()
    cursor.execute("SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state", epsilon=1.0)
    assert cursor.fetchall() == first and connection.budget_spent().epsilon == pytest.approx(1.0)
    cursor.execute("SELECT state, COUNT(*) FROM visits GROUP BY state", epsilon=1.0)
    assert connection.budget_spent().epsilon == pytest.approx(2.0)
    cursor.execute("SELECT COUNT(DISTINCT person_id) FROM visits", epsilon=1.0)
    assert connection.budget_spent().epsilon == pytest.approx(3.0)
    connection.close()


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT state, COUNT(DISTINCT age) FROM visits GROUP BY state", "only COUNT(DISTINCT person_id), the privacy unit"),
    ("SELECT COUNT(DISTINCT person_id, state) FROM visits", "takes one column"),
    ("SELECT state, sex, COUNT(DISTINCT person_id) FROM visits GROUP BY CUBE (state, sex)", "several grouping sets"),
    ("SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY ROLLUP (state)", "do not add up over grouping sets"),
    ("SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state UNION ALL "
     "SELECT sex, COUNT(DISTINCT person_id) FROM visits GROUP BY sex", "several grouping sets"),
    ("SELECT age // 10 AS decade, COUNT(DISTINCT person_id) FROM visits GROUP BY decade", "derived group column"),
    ("SELECT browser, state, COUNT(DISTINCT person_id) FROM visits GROUP BY browser, state", "without a declared domain"),
])
def test_refused_forms_name_the_reason_and_charge_nothing(sql: str, fragment: str) -> None:
    frame = visits().assign(browser="firefox")
    table_schema = schema(max_groups=2)
    table_schema["columns"] = {**table_schema["columns"], "browser": "unknown"}  # type: ignore[dict-item]
    connection = connect(frame, table_schema)
    with pytest.raises(dpsql.NotSupportedError) as raised:
        connection.cursor().execute(sql, epsilon=1.0)
    assert fragment in str(raised.value)
    assert connection.budget_spent().epsilon == 0
    connection.close()


def test_grouped_by_keys_it_selects_each_released_key_has_duckdbs_distinct_count() -> None:
    """``GROUP BY browser`` (no declared domain) with COUNT(DISTINCT person_id): each key's distinct units, measured at
    L1 sensitivity k = 2 (a unit keeps at most 2 keys, adding 1 to each) and thresholded (at most 2 new keys of 1 unit
    per unit). Every person visits at most 2 browsers, so nothing is cut: noise off, the released keys are those whose
    distinct count reaches the threshold, with DuckDB's counts; one charge, the selection's δ. Over the keys once
    released, a later COUNT(DISTINCT) is measured over them (the remainder hidden), DuckDB's counts again."""
    frame = visits()
    frame["browser"] = np.where(frame.person_id % 7 == 0, "lynx", np.where(frame.person_id % 2 == 0, "firefox", "chrome"))
    frame.loc[frame.index % 5 == 0, "browser"] = np.where(frame.person_id[frame.index % 5 == 0] < 12, "links", "chrome")
    table_schema = schema(max_groups=2)
    table_schema["columns"] = {**table_schema["columns"], "browser": "unknown"}  # type: ignore[dict-item]
    connection = connect(frame, table_schema)
    sql = "SELECT browser, COUNT(DISTINCT person_id) FROM visits GROUP BY browser"
    rule = prepare(connection, [sql], epsilon=1.0).selection.thresholded.release  # type: ignore[union-attr]
    assert frame.groupby("person_id").browser.nunique().max() <= 2 and rule.sensitivity == 2 and rule.rows_per_key == 1
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(1):
        released = dict(connection.cursor().execute(sql, epsilon=1.0).fetchall())
    truth = dict(duckdb.sql("SELECT browser, COUNT(DISTINCT person_id) FROM frame GROUP BY browser").fetchall())
    assert released == {b: n for b, n in truth.items() if n >= rule.threshold} and 0 < len(released) < len(truth)
    spent = connection.budget_spent()
    assert spent.statements == 1 and spent.epsilon == pytest.approx(1.0) and spent.delta == pytest.approx(rule.delta)
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(2):
        again = dict(connection.cursor().execute(sql, epsilon=1.0).fetchall())
    assert again == pytest.approx(released) and connection.budget_spent().delta == spent.delta  # no selection: no δ
    connection.close()


def test_refused_in_a_batch_of_grouping_sets_and_on_a_row_level_table() -> None:
    connection = connect(visits(), schema(max_groups=2))
    with pytest.raises(dpsql.NotSupportedError, match="several grouping sets"):
        connection.workload(["SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state",
                             "SELECT sex, COUNT(DISTINCT person_id) FROM visits GROUP BY sex"], epsilon=1.0)
    assert connection.budget_spent().epsilon == 0
    connection.close()
    rows = connect(visits(), {"privacy_unit": None, "columns": {"state": {"categories": STATES}}})
    with pytest.raises(dpsql.NotSupportedError, match="row-level"):
        rows.cursor().execute("SELECT state, COUNT(DISTINCT person_id) FROM visits GROUP BY state", epsilon=1.0)
    assert rows.budget_spent().epsilon == 0
    rows.close()


def test_bins_and_a_nullable_column_equal_duckdb(adult_frame: pd.DataFrame, adult_schema: dict[str, object]) -> None:
    """A binned column enters the SQL as its cell number and a nullable one with its NULL cell: the pairs
    are distinct over those, as DuckDB's COUNT(DISTINCT) over the bins and the NULL group."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0))
    connection.register("adult", adult_frame, schema={**adult_schema, "max_groups_per_unit": 20})  # no unit is cut
    released = exact(connection.cursor(), "SELECT income, job, COUNT(DISTINCT person_id) FROM adult WHERE race <> 0 GROUP BY income, job")
    frame = adult_frame  # noqa: F841 - read by DuckDB below
    expected = duckdb.sql(
        "SELECT CASE WHEN income < 10000 THEN 0 WHEN income < 50000 THEN 1 WHEN income < 100000 THEN 2 ELSE 3 END, job, "
        "COUNT(DISTINCT person_id) FROM frame WHERE race <> 0 GROUP BY ALL ORDER BY 1, 2 NULLS LAST"
    ).fetchall()
    assert len(released) == len(expected) == 20
    assert [r[1] for r in released] == [r[1] for r in expected]
    assert [r[2] for r in released] == pytest.approx([r[2] for r in expected], abs=1e-9)
    connection.close()


def test_having_and_order_by_on_the_distinct_count() -> None:
    frame = visits()
    connection = connect(frame, schema(max_groups=10))
    released = exact(connection.cursor(), "SELECT state, COUNT(DISTINCT person_id) AS persons FROM visits "
                                           "GROUP BY state HAVING persons > 235 ORDER BY persons DESC")
    expected = duckdb.sql("SELECT state, COUNT(DISTINCT person_id) AS persons FROM frame GROUP BY state "
                          "HAVING persons > 235 ORDER BY persons DESC").fetchall()
    assert 0 < len(expected) < len(STATES)  # the condition drops some states and keeps others
    assert [s for s, _ in released] == [s for s, _ in expected]
    assert [n for _, n in released] == pytest.approx([n for _, n in expected], abs=1e-9)
    connection.close()
