"""Types at the door: declared domain values are cast to their column's type in the engine at register();
DATE, TIMESTAMP and BOOLEAN columns work with natural declarations and answer exactly like DuckDB."""

from __future__ import annotations

import datetime

import duckdb
import pandas as pd
import pytest

import dpsql
import dpsql.testing

DAYS = [datetime.date(2024, 1, 1) + datetime.timedelta(days=d) for d in range(10)]


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rows = []
    for unit in range(200):
        day = DAYS[unit % 7]
        rows.append(
            {
                "unit": unit,
                "day": day,
                "stamp": datetime.datetime(2024, 3, 1, 8 + unit % 3),
                "paid": unit % 3 == 0,
                "flag": unit % 2,
                "code": str(unit % 4),
            }
        )
    data = pd.DataFrame(rows)
    data["day"] = pd.to_datetime(data["day"]).dt.date  # a DATE column in DuckDB
    return data


def connect(frame: pd.DataFrame, columns: dict[str, object]) -> dpsql.Connection:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=100.0))
    connection.register("t", frame, schema={"privacy_unit": "unit", "columns": columns})
    return connection


def exact(frame: pd.DataFrame, sql: str) -> dict[tuple[object, ...], float]:
    database = duckdb.connect()
    database.register("t", frame)
    found = {tuple(row[:-1]): float(row[-1]) for row in database.execute(sql).fetchall()}
    database.close()
    return found


def released(connection: dpsql.Connection, sql: str) -> dict[tuple[object, ...], float]:
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute(sql, epsilon=1.0).fetchall()
    return {tuple(row[:-1]): row[-1] for row in rows}


def assert_exact(connection: dpsql.Connection, frame: pd.DataFrame, sql: str) -> dict[tuple[object, ...], float]:
    mine, theirs = released(connection, sql), exact(frame, sql)
    assert set(theirs) <= set(mine), (theirs, mine)
    for key, value in mine.items():
        assert value == pytest.approx(theirs.get(key, 0.0), abs=1e-9), key
    return mine


@pytest.mark.parametrize("declared", [[d.isoformat() for d in DAYS], DAYS], ids=["iso strings", "dates"])
def test_date_categories_count_exactly(frame: pd.DataFrame, declared: list[object]) -> None:
    connection = connect(frame, {"day": {"categories": declared}})
    counts = assert_exact(connection, frame, "SELECT day, COUNT(*) FROM t GROUP BY day")
    assert list(counts) == [(d,) for d in DAYS]  # every declared day is a row, as a date
    assert counts[(DAYS[9],)] == pytest.approx(0.0, abs=1e-9) and sum(counts.values()) == pytest.approx(200)  # least squares: no exact 0
    assert_exact(connection, frame, "SELECT COUNT(*) FROM t WHERE day >= '2024-01-04'")
    cursor = connection.cursor().execute("SELECT day, COUNT(*) FROM t GROUP BY day", epsilon=1.0)
    assert cursor.description[0][1] == dpsql.DATETIME


def test_a_range_of_dates_is_ordered_and_exact(frame: pd.DataFrame) -> None:
    connection = connect(frame, {"day": {"range": ["2024-01-01", "2024-01-10"]}, "paid": {"categories": [False, True]}})
    counts = assert_exact(connection, frame, "SELECT day, COUNT(*) FROM t GROUP BY day")
    assert len(counts) == 10
    assert_exact(connection, frame, "SELECT COUNT(*) FROM t WHERE day BETWEEN '2024-01-02' AND '2024-01-05'")
    assert_exact(connection, frame, "SELECT paid, COUNT(*) FROM t WHERE day < '2024-01-03' OR paid GROUP BY paid")  # coupled: CASE cells
    explained = connection.explain("SELECT COUNT(*) FROM t WHERE day BETWEEN '2024-01-02' AND '2024-01-05'")
    assert "date range (days) [2024-01-01, 2024-01-10]" in explained


def test_timestamp_and_boolean_categories(frame: pd.DataFrame) -> None:
    stamps = [f"2024-03-01 0{h}:00:00" if h < 10 else f"2024-03-01 {h}:00:00" for h in (8, 9, 10)]
    connection = connect(frame, {"stamp": {"categories": stamps}, "paid": {"categories": [False, True]}})
    counts = assert_exact(connection, frame, "SELECT stamp, paid, COUNT(*) FROM t GROUP BY stamp, paid")
    assert (datetime.datetime(2024, 3, 1, 8), True) in counts
    assert_exact(connection, frame, "SELECT COUNT(*) FROM t WHERE paid = true AND stamp = '2024-03-01 09:00:00'")


def test_booleans_declared_as_zero_and_one_and_numbers_on_a_text_column(frame: pd.DataFrame) -> None:
    connection = connect(frame, {"paid": {"categories": [0, 1]}, "code": {"categories": [0, 1, 2, 3]}})
    counts = assert_exact(connection, frame, "SELECT paid, code, COUNT(*) FROM t GROUP BY paid, code")
    assert (True, "2") in counts  # the engine's values: a BOOLEAN and the text '2'
    assert_exact(connection, frame, "SELECT COUNT(*) FROM t WHERE code = 2 AND paid = 1")


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"flag": {"categories": [True, False, "maybe"]}}, "categories mix types"),
        ({"flag": {"categories": ["yes", "no"]}}, r"'flag' of 't' has type BIGINT; its categories \['yes', 'no'\] do not all cast"),
        ({"day": {"categories": [1, 2]}}, "'day' of 't' has type DATE; its categories"),
        ({"stamp": {"categories": ["soon", "later"]}}, "'stamp' of 't' has type TIMESTAMP; its categories"),
        ({"flag": {"categories": [0, 1.5]}}, r"its category 1.5 becomes 2 in that type"),
        ({"code": {"range": [0, 3]}}, "'code' of 't' has type VARCHAR, but its integer range needs numbers"),
        ({"code": {"range": ["2024-01-01", "2024-01-02"]}}, "a range of dates needs a DATE or TIMESTAMP column"),
        ({"day": {"bins": [0, 1]}}, "its bins need numbers"),
        ({"flag": {"range": [0, 2**63]}}, "within ±2\\^62"),
        ({"flag": {"range": [-(10**30), 10**30]}}, "within ±2\\^62"),
        ({"flag": {"range": [0, 10**8]}}, "declare bins instead"),
        ({"day": {"categories": ["2024-01-01", "2024-1-1"]}}, "repeat a value in that type"),
    ],
)
def test_values_that_do_not_fit_the_column_are_refused_at_register(frame: pd.DataFrame, columns: dict[str, object], message: str) -> None:
    """Refused before any statement: a literal that fails to cast inside a statement's SQL would fail only
    when some row reaches the domain test — a membership oracle if it were free."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1.0))
    with pytest.raises(dpsql.ProgrammingError, match=message):
        connection.register("t", frame, schema={"privacy_unit": "unit", "columns": columns})
    assert connection.tables() == {}


def test_a_range_on_a_double_column_never_fails_on_any_value() -> None:
    """Values far beyond BIGINT in a DOUBLE column with a range domain: the cell number is computed only
    for values inside the range (a CAST that overflowed for some row would make the statement fail iff
    such a row exists). Coupled WHERE masks force the CASE."""
    data = pd.DataFrame({"unit": range(6), "x": [1.0, 2.0, 2.0, 1e30, -1e300, float("nan")], "y": [0, 1, 0, 1, 0, 1]})
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=100.0))
    connection.register("t", data, schema={"privacy_unit": "unit", "columns": {"x": {"range": [0, 5]}, "y": {"range": [0, 1]}}})
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute("SELECT y, COUNT(*) FROM t WHERE x = 2 OR y = 1 GROUP BY y", epsilon=1.0).fetchall()
    assert rows == [(0, pytest.approx(1.0)), (1, pytest.approx(1.0))]  # only x in [0, 5] counts: 1e30, -1e300, NaN dropped
