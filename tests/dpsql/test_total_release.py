"""Nothing after the read can fail, and the read returns nothing Python can fail on (docs/architecture.md,
"Total release"): each case here failed (or merged keys) after the charge, depending on the data, before
keys left the engine as text, empty key histograms and NULL aggregates under HAVING had defined answers,
and bounds were checked at register. ``tests/audit/test_neighbouring_data.py`` fuzzes the same
property over the whole grammar corpus."""

from __future__ import annotations

import datetime
import decimal
import math
from collections.abc import Iterator

import duckdb
import numpy as np
import pytest
from sqlglot import exp

import dpsql
import dpsql.testing
from dpsql.sql import bounded
from dpsql.sql import having
from conftest import ADULT_SCHEMA, make_adult

KEYED_SCHEMA = {"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {"sex": {"categories": ["F", "M"]}, "k": "unknown"}}
HUGE = 170141183460469231731687303715884105727  # HUGEINT's largest: HUGE and HUGE - 1 are the same double


def connect(database: duckdb.DuckDBPyConnection, table: str, schema: dict[str, object]) -> dpsql.Connection:
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1000.0, delta=0.5), selection_delta=1e-4)
    connection.register("t", table, schema=schema)
    return connection


@pytest.fixture()
def database() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    yield connection
    connection.close()


def released(connection: dpsql.Connection, sql: str, epsilon: float = 4.0, **options: object) -> list[tuple[object, ...]]:
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(5):
        return connection.cursor().execute(sql, epsilon=epsilon, **options).fetchall()


# -- an empty key histogram ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sql",
    ["SELECT k, COUNT(*) FROM t WHERE sex = 'F' GROUP BY k", "SELECT k, COUNT(k) FROM t WHERE sex = 'F' GROUP BY k",
     "SELECT k, sex, COUNT(*) FROM t WHERE sex = 'F' GROUP BY CUBE (k, sex)"],
    ids=["thresholded", "split", "cube"],
)
def test_selecting_keys_when_no_row_passes_the_where_clause_is_released(database: duckdb.DuckDBPyConnection, sql: str) -> None:
    """No key at all: nothing released per key, the totals of a CUBE are measured (0 without noise); charged
    like any statement that selects keys."""
    database.execute("CREATE TABLE t AS SELECT 1 AS pid, 'M' AS sex, 'chrome' AS k")
    connection = connect(database, "t", KEYED_SCHEMA)
    rows = released(connection, sql)
    assert all(row[0] is None for row in rows)  # only rolled-up rows of the CUBE, no key
    assert [row[-1] for row in rows] == [pytest.approx(0.0)] * len(rows)
    assert connection.budget_spent().delta > 0


def test_an_empty_aggregation_result_is_an_empty_key_histogram() -> None:
    aggregation = bounded.BoundedAggregation(
        table="t", columns={}, column_types={}, marginals=(("k",),), privacy_unit=None, max_rows_per_unit=1, salt=1,
        keyed=bounded.KeyedColumn("k", 1, 1, count_units=True),
    )
    empty = {name: np.array([], dtype=object) for name in (bounded.KEY_TEXT_NAME, bounded.KEPT_NAME, bounded.COUNT_NAME, bounded.UNITS_NAME)}
    histogram = aggregation.key_histogram(empty)
    assert histogram.keys == () and histogram.counts.shape == (0,) and histogram.units.shape == (0,)


# -- keys that must not merge ------------------------------------------------------------------------------
KEY_TYPES = {
    "HUGEINT": (f"{HUGE}::HUGEINT", f"{HUGE - 1}::HUGEINT", int),
    "UBIGINT": ("18446744073709551615::UBIGINT", "18446744073709551614::UBIGINT", int),
    "DECIMAL": ("1.000000000000000001::DECIMAL(38, 18)", "1.000000000000000002::DECIMAL(38, 18)", decimal.Decimal),
}


def two_keys_table(database: duckdb.DuckDBPyConnection, first: str, second: str, units: int = 300) -> None:
    """``units`` units on each of two keys (one row each)."""
    database.execute(
        f"CREATE TABLE t AS SELECT i AS pid, 'M' AS sex, CASE WHEN i % 2 = 0 THEN {first} ELSE {second} END AS k "
        f"FROM range({2 * units}) r(i)"
    )


@pytest.mark.parametrize("type_name", ["HUGEINT", "UBIGINT"])
@pytest.mark.parametrize("shell", ["{}", "SELECT * FROM ({}) AS s ORDER BY k DESC"], ids=["core", "outer-select"])
def test_declared_keys_that_are_one_double_stay_two_cells(database: duckdb.DuckDBPyConnection, type_name: str, shell: str) -> None:
    """Declared categories of a HUGEINT column were cast through a double at register (2^127 - 1 became
    2^127, a float key) and the data's values read back as doubles matched no category: every row of
    that key was dropped. An outer SELECT over such keys was refused (they were loaded as BIGINT)."""
    first, second, _ = KEY_TYPES[type_name]
    two_keys_table(database, first, second)
    keys = sorted(k for (k,) in database.execute("SELECT DISTINCT k FROM t").fetchall())
    schema = {"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {"k": {"categories": keys}}}
    rows = released(connect(database, "t", schema), shell.format("SELECT k, COUNT(*) AS n FROM t GROUP BY k"))
    assert sorted(rows) == [(keys[0], pytest.approx(300.0)), (keys[1], pytest.approx(300.0))]
    assert all(type(row[0]) is int for row in rows)


@pytest.mark.parametrize("type_name", list(KEY_TYPES))
def test_keys_that_are_one_double_stay_two_keys_with_their_exact_values(database: duckdb.DuckDBPyConnection, type_name: str) -> None:
    first, second, kind = KEY_TYPES[type_name]
    two_keys_table(database, first, second)
    exact = sorted(database.execute("SELECT k, COUNT(*) FROM t GROUP BY k").fetchall())
    rows = released(connect(database, "t", KEYED_SCHEMA), "SELECT k, COUNT(*) FROM t GROUP BY k")
    assert [(key, pytest.approx(float(n))) for key, n in exact] == rows  # 300 + 300, never 600
    assert all(type(row[0]) is kind for row in rows)


def test_merged_keys_would_let_one_unit_put_twice_its_bound_into_a_key(database: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken variant (keys read through a double, as before) is caught: a unit with one row on each of
    two HUGEINT keys adds 2 to one released count, against a bound of 1 row per key."""
    schema = {**KEYED_SCHEMA, "max_rows_per_unit": 2, "max_groups_per_unit": 2, "max_rows_per_group": 1}
    two_keys_table(database, KEY_TYPES["HUGEINT"][0], KEY_TYPES["HUGEINT"][1])
    database.execute(f"CREATE TABLE t_prime AS SELECT * FROM t UNION ALL SELECT 9999, 'M', {HUGE}::HUGEINT UNION ALL SELECT 9999, 'M', {HUGE - 1}::HUGEINT")

    def largest_move() -> float:
        before = dict(released(connect(database, "t", schema), "SELECT k, COUNT(*) FROM t GROUP BY k"))
        after = dict(released(connect(database, "t_prime", schema), "SELECT k, COUNT(*) FROM t GROUP BY k"))
        return max(abs(after[key] - before[key]) for key in before.keys() & after.keys())  # type: ignore[operator]

    assert largest_move() == pytest.approx(1.0)
    monkeypatch.setattr(bounded, "key_text", lambda key: exp.cast(exp.cast(key, "DOUBLE"), "TEXT"))
    assert largest_move() == pytest.approx(2.0)


def test_null_nan_and_infinities_are_keys_of_their_own(database: duckdb.DuckDBPyConnection) -> None:
    values = ["NULL", "'nan'::DOUBLE", "'inf'::DOUBLE", "'-inf'::DOUBLE", "0.0::DOUBLE", "-0.0::DOUBLE", "1.5::DOUBLE"]
    database.execute(
        "CREATE TABLE t AS SELECT i AS pid, 'M' AS sex, CASE i % 7 "
        + " ".join(f"WHEN {n} THEN {v}" for n, v in enumerate(values)) + " END AS k FROM range(700) r(i)"
    )
    rows = released(connect(database, "t", KEYED_SCHEMA), "SELECT k, COUNT(*) FROM t GROUP BY k")
    keys = [row[0] for row in rows]
    assert keys[:3] == [-math.inf, 0.0, 1.5] and keys[3] == math.inf and math.isnan(keys[4]) and keys[5] is None  # 0.0 = -0.0 in SQL
    assert [row[1] for row in rows] == [pytest.approx(n) for n in (100, 200, 100, 100, 100, 100)]


# -- dates Python cannot hold ---------------------------------------------------------------------------------
def test_date_keys_infinity_and_far_years_are_released_as_text(database: duckdb.DuckDBPyConnection) -> None:
    values = ["'infinity'::DATE", "'-infinity'::DATE", "'2024-02-29'::DATE", "'294247-01-10'::DATE"]
    database.execute(
        "CREATE TABLE t AS SELECT i AS pid, 'M' AS sex, CASE i % 4 "
        + " ".join(f"WHEN {n} THEN {v}" for n, v in enumerate(values)) + " END AS k FROM range(400) r(i)"
    )
    connection = connect(database, "t", KEYED_SCHEMA)
    rows = released(connection, "SELECT k, COUNT(*) FROM t GROUP BY k")
    assert [row[0] for row in rows] == [datetime.date(2024, 2, 29), "-infinity", "294247-01-10", "infinity"]
    assert [row[1] for row in rows] == [pytest.approx(100)] * 4
    # the released key set in WHERE: a key shown as text cannot be compared with a date (UNKNOWN, like NULL)
    later = released(connection, "SELECT COUNT(*) FROM t WHERE k >= '2000-01-01'")
    assert later == [(pytest.approx(100),)]
    assert released(connection, "SELECT COUNT(*) FROM t WHERE k = 'infinity'") == [(pytest.approx(100),)]


# -- bounds whose sums could overflow --------------------------------------------------------------------------
def test_bounds_beyond_2_to_the_53_are_refused_at_register_and_ranges_when_summed(database: duckdb.DuckDBPyConnection) -> None:
    database.execute(f"CREATE TABLE t AS SELECT 1 AS pid, 1e305::DOUBLE AS v, {(1 << 60) + 3} AS r")
    with pytest.raises(dpsql.ProgrammingError, match=r"bounds \[0, 1e\+305\] lie beyond ±2\^53.*larger units"):
        connect(database, "t", {"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {"v": {"bounds": [0, 1e305]}}})
    wide = {"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {"r": {"range": [1 << 60, (1 << 60) + 10]}}}
    connection = connect(database, "t", wide)
    with pytest.raises(dpsql.NotSupportedError, match="beyond ±2\\^53"):
        connection.cursor().execute("SELECT SUM(r) FROM t", epsilon=1.0)
    assert connection.budget_spent().epsilon == 0
    # counting it is fine, in exact cells (its values would not read back exactly as doubles)
    counts = dict(released(connection, f"SELECT r, COUNT(*) FROM t WHERE r >= {(1 << 60) + 2} GROUP BY r"))
    assert counts[(1 << 60) + 3] == pytest.approx(1.0) and counts[(1 << 60) + 2] == pytest.approx(0.0)


@pytest.mark.parametrize("function", ["SUM", "AVG", "VARIANCE", "STDDEV_POP"])
def test_extreme_values_within_the_widest_bounds_give_finite_answers(database: duckdb.DuckDBPyConnection, function: str) -> None:
    database.execute(
        "CREATE TABLE t AS SELECT i AS pid, CASE i % 4 WHEN 0 THEN 1e308 WHEN 1 THEN '-inf'::DOUBLE WHEN 2 THEN 'nan'::DOUBLE ELSE 9e15 END AS v "
        "FROM range(40) r(i)"
    )
    connection = connect(database, "t", {"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {"v": {"bounds": [-(2.0**53), 2.0**53]}}})
    cursor = connection.cursor()
    with dpsql.testing.seeded(2):
        (value,) = cursor.execute(f"SELECT {function}(v) FROM t", epsilon=1.0).fetchone()
    assert value is not None and math.isfinite(value) and all(e is None or not math.isnan(e) for e in cursor.errors[0])


def test_the_weight_sum_of_no_row_is_zero_and_read_as_an_exact_integer(database: duckdb.DuckDBPyConnection) -> None:
    """``LEAST`` skips NULL: the sum of an empty table must be 0, not the saturation bound."""
    database.execute("CREATE TABLE t AS SELECT 1 AS pid, 5 AS v WHERE false")
    connection = connect(database, "t", {"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {"v": {"bounds": [0, 10]}}})
    assert released(connection, "SELECT SUM(v), COUNT(*) FROM t") == [(pytest.approx(0.0), pytest.approx(0.0))]
    sql = bounded._exact_sum(exp.column("w0")).sql(dialect="duckdb")
    assert sql == "CAST(LEAST(COALESCE(SUM(w0), 0), 9223372036854775807) AS BIGINT)"


# -- NULL aggregates under HAVING --------------------------------------------------------------------------------
def test_having_follows_three_valued_logic_on_null_aggregates() -> None:
    holds, test, negation = having.holds, having.Test, having.Negation
    null, big = (None, 5.0), (60.0, 5.0)
    above = test(0, ">", 50.0)
    assert not holds(above, null) and not holds(negation(above), null)  # UNKNOWN either way
    assert holds(having.AnyOf((above, test(1, ">", 1.0))), null)  # UNKNOWN OR TRUE
    assert not holds(having.AllOf((negation(above), test(1, ">", 1.0))), null)  # UNKNOWN AND TRUE
    assert not holds(having.AllOf((above, test(1, "<", 1.0))), null)  # UNKNOWN AND FALSE
    assert holds(above, big) and not holds(negation(above), big)


@pytest.mark.parametrize("having", ["MEDIAN(age) > 50", "NOT AVG(age) > 50", "MIN(age) < 20 OR COUNT(*) > 1e9"])
def test_having_on_an_aggregate_of_an_empty_group_drops_the_group(database: duckdb.DuckDBPyConnection, having: str) -> None:
    database.execute("CREATE TABLE t AS SELECT i AS pid, i % 2 AS race, 30 + i % 40 AS age FROM range(200) r(i)")  # race 2: no row
    schema = {"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {"race": {"categories": [0, 1, 2]}, "age": {"range": [17, 90]}}}
    rows = released(connect(database, "t", schema), f"SELECT race, COUNT(*) FROM t GROUP BY race HAVING {having}")
    assert 2 not in [row[0] for row in rows]


def test_an_empty_group_counts_exactly_zero_and_averages_null(database: duckdb.DuckDBPyConnection) -> None:
    """Least squares left the empty group's count at 1.2e-14, not 0, so its AVG was a ratio of residues (66.4,
    error 2·10¹⁵) where docs/math.md defines NULL."""
    database.execute("CREATE TABLE t AS SELECT i AS pid, i % 2 AS race, 30 + i % 40 AS age FROM range(200) r(i)")  # race 2: no row
    schema = {"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {"race": {"categories": [0, 1, 2]}, "age": {"range": [17, 90]}}}
    rows = released(connect(database, "t", schema), "SELECT race, COUNT(*), AVG(age) FROM t GROUP BY race")
    assert rows[2] == (2, 0.0, None)


# -- declared values read back from the result (one row = one unit) ------------------------------------------
def test_without_a_privacy_unit_a_date_infinity_in_a_declared_column_is_tested_in_sql(database: duckdb.DuckDBPyConnection) -> None:
    """A table without privacy unit may test a grouped column's domain on the (small) result — but a DATE
    'infinity' cannot be read back, so such a column is tested in SQL."""
    database.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('2024-01-01'::DATE), ('infinity'::DATE), ('2024-01-02'::DATE)) v(day)")
    schema = {"privacy_unit": None, "max_rows_per_unit": 1, "columns": {"day": {"categories": ["2024-01-01", "2024-01-02"]}}}
    rows = released(connect(database, "t", schema), "SELECT day, COUNT(*) FROM t GROUP BY day")
    assert rows == [(datetime.date(2024, 1, 1), pytest.approx(1.0)), (datetime.date(2024, 1, 2), pytest.approx(1.0))]


# -- over dpsql serve: a statement that selects keys ---------------------------------------------------------
def test_a_statement_selecting_keys_is_described_and_answered_over_the_wire(tmp_path: object) -> None:
    """The server once described a statement by running it on an empty replica: no key at all, an error after
    the charge, so every key-selecting statement failed with XX000. An empty key histogram now has a defined
    answer (and Describe prepares without running)."""
    psycopg = pytest.importorskip("psycopg")
    from conftest import ADULT_SCHEMA, make_adult
    from serve_helpers import dsn, running, write_config

    with running(write_config(tmp_path, make_adult(300, 3), ADULT_SCHEMA)) as server:  # type: ignore[arg-type]
        with psycopg.connect(dsn(server, "carol"), autocommit=True) as connection:
            connection.execute("SET dpsql.epsilon = 1")
            rows = connection.execute("SELECT browser, COUNT(*) FROM adult GROUP BY browser").fetchall()  # extended protocol
    assert {key for key, _ in rows} <= {"chrome", "firefox", "safari"} and rows


def test_grouping_sets_over_no_rows_are_released() -> None:
    """An engine result of no rows for several grouping sets (the plan reads (sex, race) and (sex), the total
    derived): the rows of each set were found by reshaping the GROUPING() ids to (rows, -1), which numpy
    cannot do for 0 rows — a failure after the charge on the empty table only."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0))
    connection.register("adult", make_adult(persons=50, seed=1).iloc[:0], schema=ADULT_SCHEMA)
    sql = "SELECT sex, race, SUM(age) AS total, AVG(age) AS mean FROM adult WHERE income >= 10000 GROUP BY ROLLUP (sex, race)"
    with dpsql.testing.noise_disabled():
        for _ in range(2):  # inline, then from the kept rows
            rows = connection.execute(sql, epsilon=1.0).fetchall()
            assert len(rows) == 2 * 5 + 2 + 1 and all(row[2] == 0 and row[3] is None for row in rows)
