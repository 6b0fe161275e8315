"""Derived GROUP BY columns and HAVING.

Derived columns: values and types equal DuckDB's for the same expression on every cell of the declared
domain (negative integers, dates), noise-free answers equal DuckDB's on a table with a date column, the
workload stays one aggregation block over the source column. HAVING: post-processing of the released
values (nothing charged for it, rows dropped exactly where the released value fails), the aggregates
it uses measured when not shown; ORDER BY an aggregate not shown.
"""

from __future__ import annotations

import datetime

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
from conftest import ADULT_SCHEMA
from dpsql.schema import ColumnDomain
from dpsql.sql.compile import compile_query
from dpsql.sql.derived import derived_map
from dpsql.sql.statement import parse_statement
from dpsql.workloads import compile_batch
from planner import Identity

DAYS = ("2023-11-20", "2025-02-10")
VISITS_SCHEMA = {
    "privacy_unit": None,
    "columns": {"day": {"range": list(DAYS)}, "x": {"range": [-25, 25]}, "kind": {"categories": ["a", "b"], "nullable": True}},
}


@pytest.fixture()
def visits() -> tuple[dpsql.Connection, pd.DataFrame]:
    rng = np.random.default_rng(11)
    n = 3000
    start = datetime.date.fromisoformat(DAYS[0])
    span = (datetime.date.fromisoformat(DAYS[1]) - start).days + 1
    frame = pd.DataFrame(
        {
            "day": [start + datetime.timedelta(days=int(d)) for d in rng.integers(0, span, size=n)],
            "x": rng.integers(-25, 26, size=n),
            "kind": rng.choice(np.array(["a", "b", None], dtype=object), size=n),
        }
    )
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1000.0, delta=1e-6))
    connection.register("visits", frame, schema=VISITS_SCHEMA)
    yield connection, frame
    connection.close()


def _compiled(connection: dpsql.Connection, sql: str):  # noqa: ANN202
    table = connection._session.table("visits")
    return compile_query(parse_statement(sql).branches[0].query, table.schema, tuple(table.column_types))


ARITHMETIC = ["x / 7", "x // 7", "x % 7", "x - x % 5", "floor(x / 4)", "ceil(x / 4)", "-x * 3 + 1", "(x + 30) // 10 * 10", "x // -4", "x % -4"]
DATES = [
    "date_trunc('month', day)", "date_trunc('week', day)", "date_trunc('quarter', day)", "date_trunc('year', day)",
    "date_trunc('day', day)", "extract(year FROM day)", "extract(dow FROM day)", "extract(isodow FROM day)",
    "extract(doy FROM day)", "extract(week FROM day)", "date_part('quarter', day)", "year(day)", "month(day)",
    "day(day)", "dayofweek(day)", "quarter(day)", "week(day)",
]  # fmt: skip


@pytest.mark.parametrize("expression", ARITHMETIC + DATES)
def test_derived_values_and_types_equal_duckdb_on_every_declared_cell(visits, expression: str) -> None:  # noqa: ANN001
    connection, _ = visits
    compiled = _compiled(connection, f"SELECT {expression} AS v, COUNT(*) FROM visits GROUP BY v")
    (derived,) = compiled.derived.values()
    source = compiled.columns[derived.source]
    cells = source.labels()
    mapped = derived.map.domain.labels()
    ours = [mapped[i] for i in derived.map.cell_of]
    engine = duckdb.connect()
    column_type = "DATE" if source.is_date_range else "INTEGER"
    engine.execute(f"CREATE TABLE t ({derived.source} {column_type})")
    engine.executemany("INSERT INTO t VALUES (?)", [[c] for c in cells])
    theirs = [r[0] for r in engine.execute(f"SELECT {expression} FROM t ORDER BY {derived.source}").fetchall()]
    assert len(ours) == len(theirs) == len(cells)
    for mine, reference in zip(ours, theirs):
        assert mine == reference and type(mine) is type(reference), (expression, mine, reference)


def test_case_follows_sql_three_valued_logic_and_domain_order() -> None:
    from dpsql.sql.compile import _truth
    from dpsql.sql.parse import Comparison, IsNull
    from dpsql.sql.derived import CaseWhen, Derived

    column = ColumnDomain("age", "range", (17, 22), nullable=True)
    case = CaseWhen(((Comparison("age", ">=", 20), "old"), (IsNull("age"), None)), "young")
    mapped = derived_map(Derived("k", "age", case), column, lambda p: _truth(p, ("age",), {"age": column}))
    # cells 17..22 then NULL: NULL fails '>= 20' (UNKNOWN) and falls to 'IS NULL' → NULL; values in order of first appearance
    assert mapped.domain.labels() == ("young", "old", None)
    assert mapped.cell_of.tolist() == [0, 0, 0, 1, 1, 1, 2]


def test_noise_free_date_and_arithmetic_groups_equal_duckdb(visits) -> None:  # noqa: ANN001
    connection, frame = visits
    engine = duckdb.connect()
    engine.register("visits", frame)
    statements = [
        "SELECT date_trunc('month', day) AS m, COUNT(*) FROM visits GROUP BY m",
        "SELECT extract(year FROM day) AS y, kind, COUNT(kind) FROM visits WHERE x > -3 GROUP BY 1, kind",
        "SELECT year(day) AS y, CASE WHEN x < 0 THEN 'neg' WHEN x = 0 THEN 'zero' ELSE 'pos' END AS s, COUNT(*) FROM visits "
        "WHERE day >= '2024-03-01' OR x % 2 = 0 GROUP BY CUBE (y, s)".replace(" OR x % 2 = 0", ""),
        "SELECT x // 10 AS t, x, COUNT(*) FROM visits WHERE x BETWEEN -12 AND 12 GROUP BY t, x",
    ]
    for sql in statements:
        with dpsql.testing.noise_disabled():
            rows = connection.cursor().execute(sql, epsilon=1.0).fetchall()
        reference = {r[:-1]: r[-1] for r in engine.execute(sql).fetchall()}
        released = {r[:-1]: r[-1] for r in rows}
        assert set(reference) <= set(released), sql
        for key, value in released.items():
            assert abs(value - reference.get(key, 0)) < 1e-6, (sql, key, value)


def test_derived_column_is_measured_on_its_own_cells(adult_connection: dpsql.Connection) -> None:
    """The band is an attribute of 3 cells (Identity): the plan measures 3 noisy counts, read as the
    source's counts summed through the public map before the noise."""
    sql = "SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'mid' ELSE 'old' END AS band, COUNT(*) FROM adult GROUP BY band"
    statement = parse_statement(sql)
    batch = compile_batch([statement], [1.0], *_adult(adult_connection))
    key = statement.branches[0].query.group_by[0]
    assert batch.workload.domain.attributes == (key,) and batch.workload.domain.sizes == (3,)
    (factor,) = batch.workload.products[0].factors
    assert isinstance(factor.block, Identity) and factor.block.size == 3
    assert batch.read_marginals([(key,)]) == (("age",),)
    ages = np.arange(17, 91)
    folded = batch.folded([(key,)], {("age",): ages.copy()})[(key,)]
    assert folded.tolist() == [ages[ages < 30].sum(), ages[(ages >= 30) & (ages < 60)].sum(), ages[ages >= 60].sum()]
    # each band's standard error is one count's: discrete Laplace of scale 3/ε (3 rows per unit), ε = 1
    cursor = adult_connection.cursor().execute(sql, epsilon=1.0)
    assert [r[0] for r in cursor.fetchall()] == ["young", "mid", "old"]
    q = np.exp(-1.0 / 3.0)
    for error in cursor.errors:
        assert error[1] ** 2 == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-9)


def _adult(connection: dpsql.Connection) -> tuple[object, tuple[str, ...]]:
    table = connection._session.table("adult")
    return table.schema, tuple(table.column_types)


def test_having_is_free_post_processing_of_the_released_values(adult_frame: pd.DataFrame) -> None:
    """The same seeded statement with and without HAVING (on two connections: a second statement on one
    would be answered from the first's kept measurements): the same charge, and HAVING keeps exactly the
    released rows whose released values satisfy it."""
    shown = "SELECT race, COUNT(*) AS n, COUNT(job) AS j FROM adult GROUP BY race"
    released = []
    for sql in (shown, shown + " HAVING j > 150 OR n < 60"):
        connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0, delta=1e-6))
        connection.register("adult", adult_frame, schema=ADULT_SCHEMA)
        with dpsql.testing.seeded(5):
            released.append(connection.cursor().execute(sql, epsilon=0.5).fetchall())
        assert [c.epsilon for c in connection.budget_history()] == [0.5]
        connection.close()
    everything, kept = released
    assert kept == [r for r in everything if r[2] > 150 or r[1] < 60]
    assert 0 < len(kept) < len(everything) and any(r[1] != round(r[1]) for r in everything)  # noisy values


def test_aggregate_only_having_uses_is_measured_and_hidden(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    sql = "SELECT race, COUNT(*) FROM adult WHERE sex = 'F' GROUP BY race HAVING COUNT(job) > 40.5"
    statement = parse_statement(sql)
    assert statement.names == ("race", "COUNT(*)") and len(statement.branches[0].query.select) == 3
    table = adult_connection._session.table("adult")
    compiled = compile_query(statement.branches[0].query, table.schema, tuple(table.column_types))
    assert len(compiled.workload.products) == 2  # COUNT(*) and the hidden COUNT(job): priced together
    cursor = adult_connection.cursor()
    with dpsql.testing.noise_disabled():
        rows = cursor.execute(sql, epsilon=1.0).fetchall()
    assert [d[0] for d in cursor.description] == ["race", "COUNT(*)"] and all(len(r) == 2 and len(e) == 2 for r, e in zip(rows, cursor.errors))
    engine = duckdb.connect()
    engine.register("adult", adult_frame)
    reference = dict(engine.execute(sql).fetchall())
    assert {r[0]: round(r[1]) for r in rows} == reference and 0 < len(reference) < 5


def test_order_by_an_aggregate_not_shown(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    sql = "SELECT race, COUNT(*) AS n FROM adult WHERE age < 40 GROUP BY race ORDER BY COUNT(job) DESC LIMIT 4"
    with dpsql.testing.noise_disabled():
        rows = adult_connection.cursor().execute(sql, epsilon=1.0).fetchall()
    engine = duckdb.connect()
    engine.register("adult", adult_frame)
    assert [(r[0], round(r[1])) for r in rows] == engine.execute(sql).fetchall()


def test_derived_and_having_in_batches_and_explain(adult_connection: dpsql.Connection) -> None:
    band = "CASE WHEN age < 30 THEN 'young' ELSE 'older' END"
    statements = [
        f"SELECT {band} AS band, COUNT(*) FROM adult GROUP BY band HAVING COUNT(*) > 0.5",
        "SELECT age // 10 AS decade, sex, COUNT(*) FROM adult GROUP BY ROLLUP (1, sex)",
    ]
    with dpsql.testing.noise_disabled():
        first, second = adult_connection.workload(statements, epsilon=1.0)
    assert {r[0] for r in first.fetchall()} == {"young", "older"}
    totals = {r[0]: r[2] for r in second.fetchall() if r[1] is None}
    assert totals[None] == pytest.approx(sum(r[1] for r in first.fetchall()))
    before = adult_connection.budget_remaining()
    explained = adult_connection.cursor().execute("EXPLAIN " + statements[0], epsilon=1.0).fetchall()
    assert any(r[0] == "column" and "derived from 'age': 2 cell(s)" in r[3] for r in explained)
    assert adult_connection.budget_remaining() == before


def test_bad_derived_columns_are_refused_before_anything_is_charged(adult_connection: dpsql.Connection) -> None:
    before = adult_connection.budget_remaining()
    cases = {
        "SELECT age // 0 AS x, COUNT(*) FROM adult GROUP BY x": "divides by zero",
        "SELECT age * 4611686018427387904 AS x, COUNT(*) FROM adult GROUP BY x": "overflows",
        "SELECT CASE age WHEN 20 THEN 1 END AS x, COUNT(*) FROM adult GROUP BY x": "CASE WHEN",
        "SELECT date_trunc('hour', age) AS x, COUNT(*) FROM adult GROUP BY x": "date part",
        "SELECT browser // 2 AS x, COUNT(*) FROM adult GROUP BY x": "no declared domain",
    }
    for sql, message in cases.items():
        with pytest.raises(dpsql.NotSupportedError, match=message):
            adult_connection.cursor().execute(sql, epsilon=1.0)
    assert adult_connection.budget_remaining() == before


def test_batch_with_where_masks_folds_joint_marginals(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    """Different WHERE clauses put the masks into the products: the plan then reads joint marginals of the
    derived column with its own source (and others), folded through the map; answers stay exact."""
    statements = [
        "SELECT age // 10 AS d, COUNT(*) FROM adult WHERE age > 40 OR sex = 'F' GROUP BY d",
        "SELECT age // 10 AS d, sex, COUNT(job) FROM adult WHERE race = 1 AND age < 70 GROUP BY d, sex",
    ]
    batch = compile_batch([parse_statement(s) for s in statements], [1.0, 1.0], *_adult(adult_connection))
    assert "age" in batch.workload.domain.attributes and batch.row_filters == ()
    with dpsql.testing.noise_disabled():
        results = adult_connection.workload(statements, epsilon=1.0)
    engine = duckdb.connect()
    engine.register("adult", adult_frame)
    for sql, result in zip(statements, results):
        reference = {r[:-1]: r[-1] for r in engine.execute(sql).fetchall()}
        released = {r[:-1]: r[-1] for r in result.fetchall()}
        assert set(reference) <= set(released)
        for key, value in released.items():
            assert abs(value - reference.get(key, 0)) < 1e-6, (sql, key)


def test_derived_column_with_a_column_without_domain_is_refused(adult_connection: dpsql.Connection) -> None:
    before = adult_connection.budget_remaining()
    with pytest.raises(dpsql.NotSupportedError, match="no declared domain"):
        adult_connection.cursor().execute("SELECT age // 10 AS d, browser, COUNT(*) FROM adult GROUP BY d, browser", epsilon=1.0)
    assert adult_connection.budget_remaining() == before


def test_derived_cells_the_where_clause_cannot_reach_are_not_rows(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    """Decades 1-3 hold ages 17-39 only, which the WHERE clause excludes: known empty, so not rows — unless the
    connection keeps them (``excluded_cells="zeros"``), as exact zeros."""
    sql = "SELECT age // 10 AS d, COUNT(*) FROM adult WHERE age >= 40 GROUP BY d"
    cursor = adult_connection.cursor().execute(sql, epsilon=1.0)
    assert [r[0] for r in cursor.fetchall()] == [4, 5, 6, 7, 8, 9] and all(e[1] > 0 for e in cursor.errors)
    keeping = dpsql.connect(budget=dpsql.Budget(epsilon=10.0), excluded_cells="zeros")
    keeping.register("adult", adult_frame, schema=ADULT_SCHEMA)
    cursor = keeping.cursor().execute(sql, epsilon=1.0)
    rows = dict(zip((r for r in cursor.fetchall()), cursor.errors))
    assert [(d, n) for (d, n), e in rows.items() if e[1] == 0] == [(1, 0.0), (2, 0.0), (3, 0.0)]  # exact zeros, no noise
    assert all(e[1] > 0 for (d, _), e in rows.items() if d >= 4)
    keeping.close()


def test_parameters_inside_derived_expressions_in_one_batch(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    """executemany: two bindings give two derived columns over `age`, read once and folded into each (and
    into their joint marginal when the plan measures one)."""
    sql = "SELECT CASE WHEN age < ? THEN 'young' ELSE 'old' END AS band, COUNT(*) FROM adult GROUP BY band"
    cursor = adult_connection.cursor()
    with dpsql.testing.noise_disabled():
        rows = cursor.executemany(sql, [(30,), (50,)], epsilon=1.0).fetchall()
    ages = adult_frame["age"]
    assert [(r[0], round(r[1])) for r in rows] == [
        ("young", int((ages < 30).sum())), ("old", int((ages >= 30).sum())),
        ("young", int((ages < 50).sum())), ("old", int((ages >= 50).sum())),
    ]  # fmt: skip


def test_fold_into_a_joint_marginal_of_two_derived_columns_and_their_source(adult_connection: dpsql.Connection) -> None:
    where = ("age > 20 OR sex = 'F'", "sex = 'M'")  # different WHERE clauses: masks in the products, over age
    statements = [parse_statement(f"SELECT age // {w} AS d, COUNT(*) FROM adult WHERE {c} GROUP BY d") for w, c in zip((10, 25), where)]
    batch = compile_batch(statements, [1.0, 1.0], *_adult(adult_connection))
    (ten,), (quarter,) = (s.branches[0].query.group_by for s in statements)
    assert batch.read_marginals([(ten, quarter, "age"), (ten, "sex")]) == (("age",), ("age", "sex"))
    counts = np.arange(74)  # a count per age 17..90
    joint = batch.folded([(ten, quarter, "age")], {("age",): counts})[(ten, quarter, "age")]
    ages = np.arange(17, 91)
    tens, quarters = batch.derived[ten].map.cell_of, batch.derived[quarter].map.cell_of
    assert joint.shape == (9, 4, 74) and joint.sum() == counts.sum()
    assert all(joint[tens[i], quarters[i], i] == counts[i] for i in range(74))
    assert [batch.derived[ten].map.domain.labels()[tens[i]] for i in range(74)] == list(ages // 10)


def test_local_surveys_refuse_derived_group_columns() -> None:
    from dpsql import local

    schema = {"privacy_unit": None, "columns": {"age": {"range": [1, 4]}}}
    with pytest.raises(dpsql.NotSupportedError, match="local survey answers group columns it randomized"):
        local.design(schema, ["SELECT age // 2 AS half, COUNT(*) FROM t GROUP BY half"], 1.0, seed=0, restarts=1, iterations=100)
