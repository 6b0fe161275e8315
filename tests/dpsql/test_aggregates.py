"""SUM, AVG, VARIANCE, STDDEV: schema bounds, the moment-cell encoding, answers equal
to DuckDB's on the clamped values with noise off (GROUP BY, CUBE, ROLLUP, GROUPING SETS, WHERE, NULLs,
batches), closed-form standard errors, empirical coverage of the AVG, VAR_POP and STDDEV intervals, and refusals."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot
from sqlglot import exp

import dpsql
import dpsql.testing
from conftest import ADULT_SCHEMA, make_adult
from dpsql.schema import Schema
from dpsql.sql.moments import GRID, ValueEncoding
from dpsql.sql.parse import Aggregate, Count
from dpsql.sql.statement import parse_statement
from planner.noise import discrete_laplace_variance

CORPUS = sorted((Path(__file__).resolve().parents[2] / "grammar" / "accepted" / "aggregates").glob("*.sql"))
INCOME_BOUNDS = (0, 200_000)  # wider than GRID: values are rounded to a grid of 4097 points
TIP_BOUNDS = (0, 50)  # integers 50 apart: exact
SCHEMA = {
    **ADULT_SCHEMA,
    "columns": {
        **ADULT_SCHEMA["columns"],  # type: ignore[dict-item]
        "income": {"bins": [0, 10000, 50000, 100000, 1000000], "bounds": list(INCOME_BOUNDS)},
        "tip": {"bounds": list(TIP_BOUNDS)},
    },
}


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    data = make_adult(persons=900, seed=11)
    rng = np.random.default_rng(3)
    tips = rng.integers(-5, 60, size=len(data)).astype(float)  # some below 0 and above 50: clamped
    tips[rng.random(len(data)) < 0.1] = np.nan  # NULL: ignored by SUM/AVG, counted by COUNT(*)
    return data.assign(tip=pd.array(tips, dtype="Int64"))  # an integer column (BIGINT with NULLs): its grid is exact


@pytest.fixture()
def connection(frame: pd.DataFrame):  # noqa: ANN201
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1e6, delta=1e-6))
    conn.register("adult", frame, schema=SCHEMA)
    yield conn
    conn.close()


def _clamped(column: str, bounds: tuple[float, float]) -> exp.Expression:
    """DuckDB expression of the value dpsql aggregates: clamped (NULL stays NULL), rounded to the grid."""
    low, high = bounds
    grid = high - low if high - low <= GRID else GRID
    text = f"CASE WHEN {column} IS NULL THEN NULL ELSE {low} + FLOOR((LEAST(GREATEST({column}::DOUBLE, {low}), {high}) - {low}) * {grid} / {high - low} + 0.5) * {high - low} / {grid} END"
    return sqlglot.parse_one(text, read="duckdb")


def _reference(sql: str, frame: pd.DataFrame) -> list[tuple]:
    """DuckDB's exact answer on the bounded table (max_rows_per_unit = 3 and make_adult has at most 3 rows
    per person, so nothing is dropped) over clamped, gridded values."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    for arg in ("order", "limit", "offset"):
        tree.set(arg, None)
    for node in list(tree.find_all(exp.AggFunc)):
        if isinstance(node, exp.Count) or not isinstance(node.this, exp.Column):
            continue
        name = node.this.name
        bounds = {"income": INCOME_BOUNDS, "tip": TIP_BOUNDS}.get(name)
        if bounds is not None:
            node.this.replace(_clamped(name, bounds))
    connection = duckdb.connect()
    connection.register("adult", frame)
    rows = connection.execute(tree.sql(dialect="duckdb")).fetchall()
    connection.close()
    return rows


def _by_key(rows: list[tuple], values: list[int]) -> dict[tuple, tuple]:
    keyed = {tuple(v for i, v in enumerate(r) if i not in values): tuple(r[i] for i in values) for r in rows}
    assert len(keyed) == len(rows)  # one row per group key (GROUPING SETS without duplicates)
    return keyed


def _same(released: tuple, expected: tuple) -> bool:
    return all((a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)) for a, b in zip(released, expected))


EXTRA = {  # over the columns only this file's schema has (the corpus runs on the shared adult schema too)
    "bounds_only_with_nulls": "SELECT race, COUNT(*), SUM(tip) AS tips, AVG(tip) AS mean_tip FROM adult GROUP BY race ORDER BY race",
    "clamped_and_gridded": "SELECT sex, race, SUM(income) AS total, AVG(income), VAR_POP(income) FROM adult WHERE age BETWEEN 25 AND 60 GROUP BY ROLLUP (sex, race)",
    "nullable_value_column": "SELECT sex, COUNT(*), STDDEV(tip), VARIANCE(tip) FROM adult WHERE job IS NOT NULL GROUP BY CUBE (sex)",
    "count_of_a_bounds_only_column": "SELECT race, COUNT(tip) AS with_tip, COUNT(*), SUM(tip) FROM adult GROUP BY race",  # C of the moment cells
}
STATEMENTS = {**{p.stem: p.read_text() for p in CORPUS}, **EXTRA}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_noise_free_aggregates_equal_duckdb(name: str, connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    sql = STATEMENTS[name]
    statement = parse_statement(sql)
    items = statement.branches[0].query.select
    slots = statement.branches[0].layout
    values = [p for p, s in enumerate(slots) if isinstance(s, int) and isinstance(items[s], (Count, Aggregate))]
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute(sql, epsilon=1.0)
    released = cursor.fetchall()
    reference = _reference(sql, frame)
    # cells DuckDB omits are released too: with no rows, COUNT and SUM are 0, AVG/VARIANCE/STDDEV NULL
    shown = [r for r in released if any(r[p] not in (0, None) for p in values)]
    ours, theirs = _by_key(shown, values), _by_key(reference, values)
    assert set(ours) == set(theirs)
    assert all(_same(ours[key], theirs[key]) for key in ours), [(k, ours[k], theirs[k]) for k in ours if not _same(ours[k], theirs[k])]
    for row, error in zip(released, cursor.errors):
        assert all((error[p] is None) == (row[p] is None) for p in values)


def _relative_match(released: float, expected: float) -> bool:
    return math.isclose(released, expected, rel_tol=1e-9, abs_tol=1e-6)


def test_batches_and_executemany_equal_duckdb(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    with dpsql.testing.noise_disabled():
        first, second = connection.workload(
            ["SELECT sex, AVG(tip) FROM adult GROUP BY sex", "SELECT race, COUNT(*), STDDEV(tip) FROM adult GROUP BY race"], epsilon=1.0
        )
        cursor = connection.cursor()
        cursor.executemany("SELECT sex, SUM(tip) FROM adult WHERE race = ? GROUP BY sex", [(0,), (1,)], epsilon=1.0)
        many = cursor.fetchall()
    expected = dict(_reference("SELECT sex, AVG(tip) FROM adult GROUP BY sex", frame))
    assert all(_relative_match(v, expected[k]) for k, v in first.rows)
    expected_sd = {r[0]: r for r in _reference("SELECT race, COUNT(*), STDDEV(tip) FROM adult GROUP BY race", frame)}
    assert all(_relative_match(n, expected_sd[k][1]) and _relative_match(sd, expected_sd[k][2]) for k, n, sd in second.rows)
    sums = [dict(_reference(f"SELECT sex, SUM(tip) FROM adult WHERE race = {r} GROUP BY sex", frame)) for r in (0, 1)]
    assert [_relative_match(v, sums[i // 2][k]) for i, (k, v) in enumerate(many)] == [True] * 4


def test_explain_describes_the_encoding_and_charges_nothing(connection: dpsql.Connection) -> None:
    before = connection.budget_remaining()
    rows = connection.cursor().execute("EXPLAIN SELECT sex, SUM(tip), AVG(tip) FROM adult GROUP BY CUBE (sex, race)").fetchall()
    assert connection.budget_remaining() == before
    aggregate = [r for r in rows if r[0] == "aggregate"]
    assert aggregate == [aggregate[0]] and aggregate[0][1] == "tip" and aggregate[0][2] == 50.0
    assert "clamped to [0, 50]" in aggregate[0][3] and "docs/glossary.md#aggregate" in aggregate[0][3]


# --------------------------------------------------------------------------------------------------
# The encoding: weights, sensitivity, closed-form errors, coverage.
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("moments", [1, 2])
def test_every_row_spreads_exactly_scale_units_of_non_negative_integer_weight(moments: int) -> None:
    """The sensitivity argument: a row's weights are non-negative integers summing to ``scale`` whatever
    its value (NULL, NaN, ±inf, out of bounds), so one row moves the data vector by exactly ``scale`` in L1."""
    encoding = ValueEncoding("v", -3.5, 12.25, GRID, moments, True)
    weights = encoding.weights(exp.column("v"))
    select = "SELECT v, " + ", ".join(w.sql(dialect="duckdb") for w in weights) + " FROM t"
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t AS SELECT * FROM (VALUES (NULL::DOUBLE), ('nan'::DOUBLE), ('inf'::DOUBLE), ('-inf'::DOUBLE), (-100.0), (-3.5), (0.0), (1.2345), (12.25), (99.0)) AS v(v)")
    rows = connection.execute(select).fetchall()
    for row in rows:
        cells = np.array(row[1:])
        assert cells.dtype.kind == "i" and (cells >= 0).all() and cells.sum() == encoding.scale, row
    u = {row[0]: (row[2] + (row[3] if moments == 2 else 0)) / encoding.grid ** moments for row in rows if row[0] == 1.2345}
    assert abs(-3.5 + 15.75 * u[1.2345] - 1.2345) <= 15.75 / (2 * GRID) + 1e-12  # rounded to the nearest grid point


def test_standard_errors_follow_the_closed_form(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    """Identity over the two moment cells (tip has a NULL cell too) at ε: each cell's variance is the
    discrete Laplace variance at scale k·R/ε in weight units, v = that / R² in rows. Then
    Var SUM = (lo² + hi²)·v, Var AVG = w²·v·(1 − 2r + 2r²)/C² with r = U/C (delta method)."""
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute("SELECT sex, COUNT(*), SUM(tip), AVG(tip) FROM adult GROUP BY sex", epsilon=0.5)
    assert "identity" in cursor.explanation
    low, high = TIP_BOUNDS
    grid = high - low
    v = discrete_laplace_variance(3 * grid / 0.5) / grid**2
    counts = dict(_reference("SELECT sex, COUNT(tip) FROM adult GROUP BY sex", frame))
    for row, error in zip(cursor.fetchall(), cursor.errors):
        assert math.isclose(error[1], math.sqrt(3 * v), rel_tol=1e-9)  # COUNT(*): three cells
        assert math.isclose(error[2], math.sqrt((low**2 + high**2) * v), rel_tol=1e-9)
        count = counts[row[0]]
        r = (row[3] - low) / (high - low)
        assert math.isclose(error[3], (high - low) * math.sqrt(v * (1 - 2 * r + 2 * r * r)) / count, rel_tol=1e-9)


def test_sum_alone_encodes_null_as_zero_and_counts_with_two_cells(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    """COUNT(*) beside SUM alone of a column that may hold NULL, 0 within its bounds: a NULL adds to the SUM
    what a 0 adds, so it is encoded as 0 and needs no cell of its own. COUNT(*) then carries two cells'
    noise, not three (Var = 2v, not 3v), the SUM's is unchanged (hi²·v), and the answers with noise off
    still equal DuckDB's (NULL rows counted by COUNT(*), ignored by SUM)."""
    cursor = connection.cursor()
    sql = "SELECT sex, COUNT(*), SUM(tip) FROM adult GROUP BY sex"
    with dpsql.testing.noise_disabled():
        cursor.execute(sql, epsilon=0.5)
    assert "2 cells (NULL counted as 0" in cursor.explanation
    low, high = TIP_BOUNDS
    v = discrete_laplace_variance(3 * (high - low) / 0.5) / (high - low) ** 2
    released = cursor.fetchall()
    expected = {key: values for key, *values in _reference(sql, frame)}
    assert {key: tuple(values) for key, *values in released} == {key: pytest.approx(tuple(values)) for key, values in expected.items()}
    assert int(frame.tip.isna().sum()) > 0
    for error in cursor.errors:
        assert math.isclose(error[1], math.sqrt(2 * v), rel_tol=1e-9)
        assert math.isclose(error[2], math.sqrt(high**2 * v), rel_tol=1e-9)


def test_sum_alone_of_a_double_column_encodes_null_as_zero_on_its_fine_grid() -> None:
    """The same on the fine grid of a DOUBLE column ([-2, 6]: 0 is grid point 1024 of 4096): COUNT(*) has two cells'
    variance, and with noise off both answers equal DuckDB's (up to the grid's rounding, within the stated bound)."""
    rng = np.random.default_rng(4)
    values = rng.uniform(-3, 7, 400)
    values[rng.random(400) < 0.2] = np.nan
    data = pd.DataFrame({"g": rng.choice(["a", "b"], 400), "x": values})
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0))
    connection.register("t", data, schema={"privacy_unit": None, "columns": {"g": {"categories": ["a", "b"]}, "x": {"bounds": [-2, 6]}}})
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute("SELECT g, COUNT(*), SUM(x) FROM t GROUP BY g", epsilon=1.0)
    assert "2 cells (NULL counted as 0" in cursor.explanation
    v = discrete_laplace_variance(GRID / 1.0) / GRID**2
    exact = data.assign(x=data.x.clip(-2, 6)).groupby("g").agg(n=("x", "size"), s=("x", "sum"))
    for (g, n, total), error in zip(cursor.fetchall(), cursor.errors):
        assert n == pytest.approx(exact.n[g], abs=1e-6) and math.isclose(error[1], math.sqrt(2 * v), rel_tol=1e-9)
        assert abs(total - exact.s[g]) <= exact.n[g] * 8 / (2 * GRID) + 1e-6
    connection.close()


def test_joint_plan_beats_the_even_split_for_avg(connection: dpsql.Connection) -> None:
    """Expected variance of the shifted sum behind AVG: half the even split's (sum at ε/2 with sensitivity
    (hi−lo)/2 after the midpoint shift, count at ε/2), read from the plan's own variances."""
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute("SELECT race, AVG(age) FROM adult GROUP BY race", epsilon=1.0)
    low, high = 17, 90
    v = discrete_laplace_variance(3 * (high - low) / 1.0) / (high - low) ** 2  # one moment cell, rows
    ours = 2 * v * ((high - low) / 2) ** 2  # Var(x_hi − x_lo)·(w/2)²: the shifted sum
    even = discrete_laplace_variance(3 * ((high - low) / 2) / 0.5)
    assert ours < 0.6 * even


# --------------------------------------------------------------------------------------------------
# Schema and refusals.
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"bounds": [5, 5]}, "lo < hi"),
        ({"bounds": [0, float("inf")]}, "finite"),
        ({"bounds": ["a", 1]}, "two finite numbers"),
        ({"bounds": [0, 1, 2]}, "two finite numbers"),
        ({"bounds": [True, 3]}, "two finite numbers"),
        ({"bounds": [0, 1], "nullable": True}, "keeps its NULLs"),
    ],
)
def test_bad_bounds_are_refused(spec: dict, fragment: str) -> None:
    with pytest.raises(dpsql.ProgrammingError, match=fragment):
        Schema.load({"columns": {"x": spec}})


def test_bounds_need_a_numeric_column(frame: pd.DataFrame) -> None:
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1.0))
    with pytest.raises(dpsql.ProgrammingError, match="bounds need a numeric column"):
        conn.register("adult", frame, schema={**SCHEMA, "columns": {**SCHEMA["columns"], "browser": {"bounds": [0, 1]}}})


def test_a_range_serves_as_bounds_and_bounds_never_drop_rows(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    assert Schema.load(SCHEMA).column("age").value_bounds == (17, 90)
    with dpsql.testing.noise_disabled():
        (total,) = connection.cursor().execute("SELECT COUNT(*) FROM adult", epsilon=1.0).fetchall()
        (with_tip,) = connection.cursor().execute("SELECT COUNT(*), SUM(tip) FROM adult", epsilon=1.0).fetchall()
    assert round(total[0]) == round(with_tip[0]) == len(frame)


@pytest.mark.parametrize(
    "sql, error, fragment",
    [
        ("SELECT sex, SUM(race) FROM adult GROUP BY sex", dpsql.NotSupportedError, "declare them"),
        ("SELECT sex, SUM(tip / age) FROM adult GROUP BY sex", dpsql.NotSupportedError, "division by 'age' has no bound"),
        ("SELECT browser, person_id, COUNT(browser), AVG(tip) FROM adult GROUP BY browser, person_id", dpsql.NotSupportedError, "no declared domain"),
        ("SELECT sex, AVG(nothing) FROM adult GROUP BY sex", dpsql.ProgrammingError, "unknown column"),
        ("SELECT sex, SUM(*) FROM adult GROUP BY sex", dpsql.ProgrammingError, "needs a column"),
        ("SELECT sex, SUM(tip + browser) FROM adult GROUP BY sex", dpsql.NotSupportedError, "'browser' has no bounds"),
    ],
)
def test_refused_in_prepare_without_charge(connection: dpsql.Connection, sql: str, error: type, fragment: str) -> None:
    before = connection.budget_remaining()
    with pytest.raises(error, match=fragment):
        connection.cursor().execute(sql, epsilon=1.0)
    assert connection.budget_remaining() == before


def test_a_local_survey_refuses_aggregates() -> None:
    from dpsql import local

    with pytest.raises(dpsql.NotSupportedError, match="local survey"):
        local.design({"columns": {"age": {"range": [0, 9]}}}, ["SELECT SUM(age) FROM s"], 1.0, seed=0)


def test_kept_measurements_stay_within_their_units(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    """A statement with aggregates keeps its measurement in weight units, apart from row-unit counts: the
    same statement again is free, a plain COUNT (rows) or a VARIANCE (another grid) is measured afresh."""
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute("SELECT sex, AVG(tip) FROM adult GROUP BY sex", epsilon=1.0)
        assert "answered: measured" in cursor.explanation
        cursor.execute("SELECT sex, COUNT(*), SUM(tip) FROM adult GROUP BY sex", epsilon=1.0)
        assert "answered: free" in cursor.explanation
        for sql in ("SELECT sex, COUNT(*) FROM adult GROUP BY sex", "SELECT sex, VARIANCE(tip) FROM adult GROUP BY sex"):
            cursor.execute(sql, epsilon=1.0)
            assert "answered: measured" in cursor.explanation, sql
        counts = dict(cursor.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=1.0).fetchall())
    assert counts == pytest.approx(frame.groupby("sex").size().to_dict())


def test_a_stddev_clipped_to_zero_still_has_an_error() -> None:
    """Noise can make Q/C − (U/C)² negative: the variance is clipped to 0 and STDDEV is 0, where the delta
    method divides by 0. Its error is √(1.96·se(VAR))/1.96 — the square root of the variance's 95 % band —
    not None (a noisy 0 shown without an error)."""
    encoding = ValueEncoding("v", 0.0, 10.0, 10, 2, False)
    block = encoding.block()
    cells = np.array([50.0, 30.0, 20.0])  # C = 100, U = 50, Q = 20: Q/C = 0.2 < (U/C)² = 0.25
    values = (block @ cells)[None, :]  # C, U, Q and their pairwise sums (no NULL cell)
    variances = np.ones((1, len(block)))  # every query of the block: variance 1 (so every covariance is 0)
    (variance,), (variance_error,) = encoding.released("VAR_POP", values, variances)
    (sd,), (sd_error,) = encoding.released("STDDEV_POP", values, variances)
    assert variance == 0.0 and sd == 0.0 and variance_error > 0
    assert sd_error == pytest.approx(math.sqrt(1.959964 * variance_error) / 1.959964, rel=1e-6)


def _probabilities(rows: int = 20_000) -> pd.DataFrame:
    """A DOUBLE column of fractions (a probability per row) and a DECIMAL(4, 2) copy of it rounded to cents."""
    rng = np.random.default_rng(8)
    p = rng.beta(2.0, 5.0, rows)
    return pd.DataFrame({"g": rng.integers(0, 2, rows), "p": p, "cents": np.round(p, 2)})


def test_a_double_column_gets_the_fine_grid_whatever_its_bounds() -> None:
    """``bounds: [0, 1]`` on a probability (DOUBLE) column: every value is rounded to the 4097-point grid, not
    to {0, 1} (which gave AVG 0.105 for a true 0.284), and each error includes the worst-case rounding —
    with noise off the answers are the exact ones to within that bound, and the error is at least it."""
    data = _probabilities()
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    conn.register("t", data, schema={"privacy_unit": None, "columns": {"p": {"bounds": [0, 1]}}})
    step = 1 / (2 * GRID)
    with dpsql.testing.noise_disabled():
        cursor = conn.cursor().execute("SELECT COUNT(*), SUM(p), AVG(p), STDDEV(p) FROM t", epsilon=50)
    (count, total, mean, sd), (_, total_error, mean_error, sd_error) = cursor.fetchall()[0], cursor.errors[0]
    assert count == pytest.approx(len(data))
    assert abs(total - data.p.sum()) <= step * len(data) and total_error >= step * len(data)
    assert abs(mean - data.p.mean()) <= step and mean_error >= step
    assert abs(sd - data.p.std()) <= step * 1.001 and sd_error >= step
    assert "each value within 0.000122, in every error" in cursor.explanation  # 1/8192, stated in EXPLAIN
    conn.close()


def test_a_decimal_column_gets_the_grid_of_its_scale() -> None:
    """A DECIMAL(4, 2) column with bounds [0, 1] holds values 0.01 apart: the grid has 101 points, every value
    is one of them, and with noise off the answers equal DuckDB's exactly, with no rounding in the errors."""
    data = _probabilities(2_000)
    relation = duckdb.connect()
    relation.register("source", data)
    relation.execute("CREATE TABLE t AS SELECT g, cents::DECIMAL(4, 2) AS cents FROM source")
    conn = dpsql.connect(relation, budget=dpsql.Budget(epsilon=1e6))
    conn.register("t", "t", schema={"privacy_unit": None, "columns": {"g": {"categories": [0, 1]}, "cents": {"bounds": [0, 1]}}})
    with dpsql.testing.noise_disabled():
        cursor = conn.cursor().execute("SELECT g, SUM(cents), AVG(cents) FROM t GROUP BY g", epsilon=1.0)
    exact = {g: (float(s), float(a)) for g, s, a in relation.execute("SELECT g, SUM(cents), AVG(cents) FROM t GROUP BY g").fetchall()}
    for (g, total, mean), (_, total_error, mean_error) in zip(cursor.fetchall(), cursor.errors):
        assert total == pytest.approx(exact[g][0], rel=1e-9) and mean == pytest.approx(exact[g][1], rel=1e-9)
    assert "101 grid points (exact)" in cursor.explanation
    with dpsql.testing.noise_disabled():  # the same values as DOUBLE: the fine grid, its rounding in every error
        doubled = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
        doubled.register("t", data[["g", "cents"]], schema={"privacy_unit": None, "columns": {"g": {"categories": [0, 1]}, "cents": {"bounds": [0, 1]}}})
        fine = doubled.cursor().execute("SELECT g, SUM(cents), AVG(cents) FROM t GROUP BY g", epsilon=1.0)
    for (_, _, mean_error), (_, _, fine_error) in zip(cursor.errors, fine.errors):
        assert fine_error >= mean_error + 1 / (2 * GRID) * 0.999
    conn.close()
    doubled.close()


def test_a_bins_column_is_bounded_by_its_outer_edges(frame: pd.DataFrame) -> None:
    """Without ``bounds``, a ``bins`` column's outer edges bound SUM/AVG: every counted value lies inside
    them (rows outside the bins are dropped), so with noise off the answers are DuckDB's on the raw values,
    to the grid's resolution (edges 10⁶ apart: 4097 grid points)."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    connection.register("adult", frame, schema=ADULT_SCHEMA)  # income: bins [0, …, 1000000], no bounds
    with dpsql.testing.noise_disabled():
        released = dict(connection.cursor().execute("SELECT sex, AVG(income) FROM adult GROUP BY sex", epsilon=1.0).fetchall())
    edges = ADULT_SCHEMA["columns"]["income"]["bins"]  # type: ignore[index]
    exact = duckdb.connect()
    exact.register("adult", frame)
    grid = (edges[-1] - edges[0]) / GRID
    for sex, mean in exact.execute("SELECT sex, AVG(income) FROM adult GROUP BY sex").fetchall():
        assert abs(released[sex] - mean) <= grid / 2
    connection.close()


def test_sum_of_an_affine_expression_of_a_bounds_only_column(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    """SUM(tip + 1) = SUM(tip) + COUNT(tip): the count of a column without declared domain comes from its moment
    cells (its non-NULL rows), so the statement runs; noise off, DuckDB's answer on the clamped values."""
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute("SELECT sex, SUM(tip + 1) AS s, COUNT(tip) AS n FROM adult GROUP BY sex", epsilon=1.0).fetchall()
    sums = dict(_reference("SELECT sex, SUM(tip) FROM adult GROUP BY sex", frame))
    counts = dict(_reference("SELECT sex, COUNT(tip) FROM adult GROUP BY sex", frame))
    assert all(math.isclose(s, sums[sex] + counts[sex], abs_tol=1e-6) and math.isclose(n, counts[sex], abs_tol=1e-6) for sex, s, n in rows)
