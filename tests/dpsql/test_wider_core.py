"""A wider private core: expressions inside SUM/AVG/VARIANCE/STDDEV bounded by interval arithmetic, several
aggregated columns in one statement and COUNT(DISTINCT unit) beside row aggregates, each composed of one part
per data vector at the planner's budget shares, charged once. Noise off, every statement equals DuckDB's exact
answer on the same SQL over the clamped columns; refusals happen in prepare and charge nothing."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot
from sqlglot import exp

import dpsql
import dpsql.testing
import planner
from dpsql.schema import ColumnDomain
from dpsql.sql.bounded_expressions import derive

BOUNDS = {"age": (0, 100), "tip": (0, 50)}
SCHEMA = {
    "privacy_unit": "pid",
    "max_rows_per_unit": 3,
    "max_groups_per_unit": 2,
    "columns": {"age": {"bounds": [0, 100]}, "tip": {"bounds": [0, 50]}, "sex": {"categories": ["F", "M"]}, "browser": "unknown"},
}


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    rows = 600
    tips = rng.integers(-3, 60, rows).astype(float)
    tips[rng.random(rows) < 0.1] = np.nan  # NULL: ignored by SUM/AVG, COALESCE picks its default
    return pd.DataFrame({
        "pid": np.arange(rows) % 250,  # at most 3 rows per unit: nothing is dropped by the bound
        "age": rng.integers(-10, 120, rows),  # beyond the bounds on both sides: clamped
        "tip": pd.array(tips, dtype="Int64"),
        "sex": rng.choice(["F", "M"], rows),
        "browser": rng.choice(["a", "b"], rows),
    })


@pytest.fixture()
def connection(frame: pd.DataFrame):  # noqa: ANN201
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1e6, delta=1e-6), reuse=False)
    conn.register("t", frame, schema=SCHEMA)
    yield conn
    conn.close()


def _reference(sql: str, frame: pd.DataFrame) -> list[tuple]:
    """DuckDB's exact answer to the same SQL with each bounded column clamped to its bounds (NULL stays NULL)."""
    tree = sqlglot.parse_one(sql, read="duckdb")

    def clamp(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.name in BOUNDS:
            low, high = BOUNDS[node.name]
            return sqlglot.parse_one(f"CASE WHEN {node.name} IS NULL THEN NULL ELSE LEAST(GREATEST({node.name}, {low}), {high}) END", read="duckdb")
        return node

    clamped = tree.transform(clamp)
    with duckdb.connect() as engine:
        engine.register("t", frame)
        return engine.execute(clamped.sql(dialect="duckdb")).fetchall()


def _close(ours: list[tuple], theirs: list[tuple]) -> bool:
    return len(ours) == len(theirs) and all(
        (a is None and b is None) or (a is not None and b is not None and (a == b if isinstance(a, str) else math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)))
        for row, other in zip(ours, theirs) for a, b in zip(row, other)
    )


EXACT = [
    "SELECT SUM(CASE WHEN age > 90 THEN 1 ELSE 0 END) AS old FROM t",
    "SELECT sex, SUM(CASE WHEN sex = 'M' THEN age ELSE 0 END), AVG(CASE WHEN age > 50 THEN age END) FROM t GROUP BY sex ORDER BY sex",
    "SELECT sex, SUM(age + tip), AVG(age - tip), VAR_POP(age + tip) FROM t GROUP BY sex ORDER BY sex",
    "SELECT SUM(GREATEST(age, tip) + COALESCE(tip, 3)), AVG(LEAST(age, 2 * tip)) FROM t",
    "SELECT SUM(age > 90), COUNT(*) FROM t WHERE sex = 'F'",
    "SELECT sex, STDDEV_SAMP(IF(tip IS NULL, 0, ABS(age - 50))) FROM t GROUP BY sex ORDER BY sex",
    "SELECT SUM(age), SUM(tip) FROM t",
    "SELECT sex, AVG(age), SUM(tip), COUNT(*) AS n FROM t GROUP BY sex HAVING COUNT(*) > 10 ORDER BY sex DESC",
    "SELECT COUNT(DISTINCT pid), COUNT(*) FROM t",
    "SELECT sex, COUNT(DISTINCT pid) AS persons, SUM(age + tip) AS points, AVG(age) FROM t GROUP BY sex ORDER BY sex",
]


@pytest.mark.parametrize("sql", EXACT)
def test_noise_free_answers_equal_duckdb_over_the_clamped_columns(sql: str, connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    with dpsql.testing.noise_disabled():
        released = connection.cursor().execute(sql, epsilon=1.0).fetchall()
    assert _close(released, _reference(sql, frame)), (released, _reference(sql, frame))
    assert connection.budget_spent().epsilon == pytest.approx(1.0)  # one charge, whatever the parts


@pytest.mark.parametrize("expression, interval, resolution", [
    ("age + tip", (0, 150), 1.0),
    ("age - tip", (-50, 100), 1.0),
    ("age * tip - 2 * age", (-200, 5000), 1.0),
    ("age / 4", (0, 25), None),
    ("-age / -2", (0, 50), None),
    ("CASE WHEN age > 90 THEN 1 ELSE 0 END", (0, 1), 1.0),
    ("CASE WHEN sex = 'M' THEN age END", (0, 100), 1.0),
    ("COALESCE(tip, -5) + 1", (-4, 51), 1.0),
    ("LEAST(age, tip)", (0, 100), 1.0),  # DuckDB's LEAST skips a NULL: tip may be NULL, so age alone bounds it
    ("LEAST(age, tip, 30)", (0, 30), 1.0),
    ("GREATEST(age - 80, 2)", (2, 20), 1.0),
    ("ABS(age - 60)", (0, 60), 1.0),
    ("age > tip", (0, 1), 1.0),
    ("CAST(age AS DOUBLE) * 0.5", (0, 50), None),
])
def test_interval_arithmetic_from_the_declared_bounds(expression: str, interval: tuple[float, float], resolution: float | None) -> None:
    domains = {"age": ColumnDomain("age", "range", (0, 100)), "tip": ColumnDomain("tip", "unknown", bounds=(0, 50), resolution=1),
               "sex": ColumnDomain("sex", "categories", ("F", "M"))}
    derived = derive(sqlglot.parse_one(expression, read="duckdb").sql(dialect="duckdb"), domains.__getitem__, "SUM")
    assert (derived.low, derived.high) == interval and derived.resolution == resolution


def test_explain_shows_the_derived_bounds_and_the_sensitivity(connection: dpsql.Connection) -> None:
    rows = connection.cursor().execute("EXPLAIN SELECT SUM(age + tip) FROM t", epsilon=1.0).fetchall()
    aggregate = next(r for r in rows if r[0] == "aggregate")
    assert "clamped to [0, 150] (bounds by interval arithmetic" in aggregate[3] and aggregate[2] == 150.0  # exact grid: 150 units per row
    assert connection.budget_spent().epsilon == 0


def test_a_flag_sum_has_the_error_of_a_count(connection: dpsql.Connection) -> None:
    """SUM of a 0/1 expression is a count of the rows where it is 1: its interval [0, 1] gives it a count's
    sensitivity, so its error bar is exactly that of COUNT(*) at the same cost."""
    cursor = connection.cursor()
    flag = cursor.execute("SELECT SUM(CASE WHEN age > 90 THEN 1 ELSE 0 END) FROM t", epsilon=0.5).errors[0][0]
    count = cursor.execute("SELECT COUNT(*) FROM t", epsilon=0.5).errors[0][0]
    assert flag == pytest.approx(count, rel=1e-9)


def test_extreme_values_give_a_defined_bounded_answer() -> None:
    """NaN, ±infinity, NULL and BIGINTs whose product overflows are clamped before any arithmetic: the statement
    answers (no engine error after the charge) within its stated error of DuckDB's answer over the clamped values."""
    frame = pd.DataFrame({
        "pid": range(8),
        "d": [math.nan, math.inf, -math.inf, None, 1e308, -3.5, 2.25, 7.0],
        "b": [2**62, -(2**62), 5, None, 7, 1000, 3, 2**63 - 1],
    })
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=100.0))
    conn.register("x", frame, schema={"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {"d": {"bounds": [-10, 10]}, "b": {"bounds": [0, 1000]}}})
    with dpsql.testing.noise_disabled():
        cursor = conn.cursor().execute("SELECT SUM(d * b + CASE WHEN d > 0 THEN 1 ELSE 0 END) FROM x", epsilon=1.0)
    released, error = cursor.fetchall()[0][0], cursor.errors[0][0]
    clamped = "LEAST(GREATEST(CAST(d AS DOUBLE), -10), 10) * LEAST(GREATEST(CAST(b AS DOUBLE), 0), 1000)"
    expected = duckdb.execute(f"SELECT SUM({clamped} + CASE WHEN LEAST(GREATEST(d, -10), 10) > 0 THEN 1 ELSE 0 END) FROM frame").fetchall()[0][0]
    assert math.isfinite(released) and abs(released - expected) <= error
    conn.close()


def test_composed_parts_are_measured_at_the_planners_shares(connection: dpsql.Connection) -> None:
    """COUNT(DISTINCT pid) beside COUNT(*): two measurements of different data. Their shares are those
    ``planner.composition_shares`` gives for their errors at the whole budget (not an equal split), each
    released value has the error of its statement alone at its share, and the statement is charged once."""
    cursor = connection.cursor()
    explained = cursor.execute("EXPLAIN SELECT COUNT(DISTINCT pid), COUNT(*) FROM t", epsilon=1.0).fetchall()
    shares = [r[2] for r in explained if r[0] == "composition" and r[1].startswith("part ")]
    alone = [cursor.execute(f"EXPLAIN {sql}", epsilon=1.0).fetchall() for sql in ("SELECT COUNT(DISTINCT pid) FROM t", "SELECT COUNT(*) FROM t")]
    errors = [next(r[2] for r in rows if r[0] == "query") ** 2 for rows in alone]  # one query each: its RMSE²
    assert shares == pytest.approx(list(planner.composition_shares(errors, laplace=True)), rel=1e-6)
    assert abs(shares[0] - 0.5) > 0.1 and sum(shares) == pytest.approx(1.0)
    released = cursor.execute("SELECT COUNT(DISTINCT pid), COUNT(*) FROM t", epsilon=1.0).errors[0]
    assert connection.budget_spent().epsilon == pytest.approx(1.0)
    for share, sql, error in zip(shares, ("SELECT COUNT(DISTINCT pid) FROM t", "SELECT COUNT(*) FROM t"), released):
        assert error == pytest.approx(cursor.execute(sql, epsilon=share).errors[0][0], rel=1e-6)


@pytest.mark.parametrize("sql, error, fragment", [
    ("SELECT SUM(age / tip) FROM t", dpsql.NotSupportedError, "division by 'tip' has no bound"),
    ("SELECT SUM(age + browser) FROM t", dpsql.NotSupportedError, "'browser' has no bounds"),
    ("SELECT SUM(CASE WHEN sex = 'X' THEN age ELSE 0 END) FROM t", dpsql.ProgrammingError, "not one of the declared values"),
    ("SELECT SUM(SQRT(age)) FROM t", dpsql.NotSupportedError, "is not supported there"),
    ("SELECT SUM(CAST(age / 3 AS INTEGER)) FROM t", dpsql.NotSupportedError, "rounding differs between engines"),
    ("SELECT SUM(age * 0 + 1 - 1 + tip * 0) FROM t", dpsql.NotSupportedError, "takes one value"),
    ("SELECT browser, SUM(age), SUM(tip) FROM t GROUP BY browser", dpsql.NotSupportedError, "no declared domain"),
])
def test_refused_in_prepare_without_charge(connection: dpsql.Connection, sql: str, error: type, fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        connection.cursor().execute(sql, epsilon=1.0)
    assert connection.budget_spent().epsilon == 0


def test_parts_over_grouping_sets_match_rows_by_their_set(adult_frame: pd.DataFrame, adult_schema: dict[str, object]) -> None:
    """A ROLLUP over a nullable column has two rows whose key is NULL (the NULL group and the total): the parts'
    rows are joined on their grouping set too, so each appears once, as in DuckDB."""
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=100.0), reuse=False)
    columns = {**adult_schema["columns"], "race": {"range": [0, 4]}}  # type: ignore[dict-item]  # an exact grid: AVG equals DuckDB's
    conn.register("adult", adult_frame, schema={**adult_schema, "columns": columns})
    sql = "SELECT job, SUM(age) AS years, AVG(race) AS mean_race FROM adult GROUP BY ROLLUP (job) ORDER BY job NULLS FIRST, years"
    with dpsql.testing.noise_disabled():
        released = conn.cursor().execute(sql, epsilon=1.0).fetchall()
    frame = adult_frame  # noqa: F841 - read by DuckDB below
    assert _close(released, duckdb.sql(sql.replace("FROM adult", "FROM frame")).fetchall())
    conn.close()
