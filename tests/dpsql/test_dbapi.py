"""PEP 249 (DB-API 2.0), walked clause by clause."""

from __future__ import annotations

import datetime

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing

SCHEMA = {
    "privacy_unit": None,
    "columns": {"sex": {"categories": ["F", "M"]}, "age": {"range": [20, 22]}},
}
FRAME = pd.DataFrame({"sex": ["F", "M", "F", "F", "M"], "age": [20, 21, 22, 20, 20]})
BY_AGE = "SELECT age, COUNT(*) AS n FROM t GROUP BY age"  # 3 rows: (20, 3), (21, 1), (22, 1)


def rounded(rows: object) -> object:
    """Rows with released floats rounded (least squares leaves ~1e-15 residue on exact counts)."""
    if isinstance(rows, list):
        return [rounded(r) for r in rows]
    if isinstance(rows, tuple):
        return tuple(round(v, 9) if isinstance(v, float) else v for v in rows)
    return rows


@pytest.fixture()
def connection() -> dpsql.Connection:
    connection = dpsql.connect(budget=dpsql.Budget(100.0))
    connection.register("t", FRAME, schema=SCHEMA)
    return connection


# -- Module interface ------------------------------------------------------------------------------------


def test_module_globals() -> None:
    assert dpsql.apilevel == "2.0"
    assert dpsql.threadsafety == 1
    assert dpsql.paramstyle == "qmark"


def test_exception_hierarchy() -> None:
    assert issubclass(dpsql.Warning, Exception)
    assert issubclass(dpsql.Error, Exception)
    assert not issubclass(dpsql.Warning, dpsql.Error)
    assert issubclass(dpsql.InterfaceError, dpsql.Error)
    assert issubclass(dpsql.DatabaseError, dpsql.Error)
    for name in ("DataError", "OperationalError", "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError"):
        assert issubclass(getattr(dpsql, name), dpsql.DatabaseError), name
    assert issubclass(dpsql.BudgetExceededError, dpsql.DatabaseError)


def test_connect_returns_a_connection(connection: dpsql.Connection) -> None:
    assert isinstance(connection, dpsql.Connection)


# -- Connection objects -----------------------------------------------------------------------------------


def test_close_makes_the_connection_unusable(connection: dpsql.Connection) -> None:
    cursor = connection.cursor()
    connection.close()
    assert connection.closed
    for action in (connection.cursor, connection.commit, connection.rollback):
        with pytest.raises(dpsql.InterfaceError, match="closed"):
            action()
    with pytest.raises(dpsql.InterfaceError, match="closed"):
        cursor.execute(BY_AGE, epsilon=0.1)
    connection.close()  # closing twice is harmless


def test_commit_and_rollback_are_no_ops(connection: dpsql.Connection) -> None:
    assert connection.commit() is None
    assert connection.rollback() is None
    assert connection.budget_remaining() == 100.0


def test_context_manager_closes(connection: dpsql.Connection) -> None:
    with connection as same:
        assert same is connection
    assert connection.closed


def test_exceptions_are_connection_attributes(connection: dpsql.Connection) -> None:
    assert connection.ProgrammingError is dpsql.ProgrammingError
    assert connection.BudgetExceededError is dpsql.BudgetExceededError


# -- Cursor objects ---------------------------------------------------------------------------------------


def test_description_and_rowcount(connection: dpsql.Connection) -> None:
    cursor = connection.cursor()
    assert cursor.description is None and cursor.rowcount == -1
    cursor.execute("SELECT sex, age, COUNT(*) AS n FROM t GROUP BY sex, age", epsilon=0.5)
    assert [d[0] for d in cursor.description] == ["sex", "age", "n"]
    assert all(len(d) == 7 for d in cursor.description)
    assert cursor.description[0][1] == dpsql.STRING
    assert cursor.description[1][1] == dpsql.NUMBER
    assert cursor.description[2][1] == dpsql.NUMBER
    assert cursor.rowcount == 6


def test_fetch_methods_and_arraysize(connection: dpsql.Connection) -> None:
    cursor = connection.cursor()
    assert cursor.arraysize == 1
    with dpsql.testing.noise_disabled():
        cursor.execute(BY_AGE, epsilon=0.5)
    assert rounded(cursor.fetchone()) == (20, 3.0)
    assert rounded(cursor.fetchmany()) == [(21, 1.0)]  # arraysize rows
    assert rounded(cursor.fetchmany(5)) == [(22, 1.0)]
    assert cursor.fetchone() is None
    assert rounded(cursor.fetchall()) == [] and cursor.fetchmany(2) == []
    cursor.arraysize = 2
    with dpsql.testing.noise_disabled():
        cursor.execute(BY_AGE, epsilon=0.5)
    assert rounded(cursor.fetchmany()) == [(20, 3.0), (21, 1.0)]
    assert rounded(cursor.fetchall()) == [(22, 1.0)]
    with pytest.raises(dpsql.ProgrammingError, match="non-negative"):
        cursor.fetchmany(-1)


def test_iteration(connection: dpsql.Connection) -> None:
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        rows = list(cursor.execute(BY_AGE, epsilon=0.5))  # execute returns the cursor
    assert rounded(rows) == [(20, 3.0), (21, 1.0), (22, 1.0)]


def test_fetch_without_result_set(connection: dpsql.Connection) -> None:
    cursor = connection.cursor()
    for action in (cursor.fetchone, cursor.fetchall, cursor.fetchmany):
        with pytest.raises(dpsql.InterfaceError, match="no result set"):
            action()


def test_execute_with_parameters(connection: dpsql.Connection) -> None:
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute("SELECT COUNT(*) AS n FROM t WHERE sex = ? AND age >= ?", ("F", 21), epsilon=0.5)
    assert rounded(cursor.fetchall()) == [(1.0,)]
    with pytest.raises(dpsql.ProgrammingError, match="placeholder"):
        cursor.execute("SELECT COUNT(*) FROM t WHERE sex = ?", epsilon=0.5)


def test_executemany_runs_each_and_concatenates(connection: dpsql.Connection) -> None:
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.executemany("SELECT COUNT(*) AS n FROM t WHERE sex = ?", [("F",), ("M",)], epsilon=0.5)
    assert rounded(cursor.fetchall()) == [(3.0,), (2.0,)]
    assert cursor.rowcount == 2
    assert connection.budget_remaining() == pytest.approx(99.0)


def test_executemany_refuses_a_batch_that_does_not_fit_whole() -> None:
    connection = dpsql.connect(budget=dpsql.Budget(1.0))
    connection.register("t", FRAME, schema=SCHEMA)
    with pytest.raises(dpsql.BudgetExceededError):
        connection.cursor().executemany("SELECT COUNT(*) FROM t WHERE sex = ?", [("F",), ("M",), ("F",)], epsilon=0.4)
    assert connection.budget_remaining() == 1.0


def test_closed_cursor_is_unusable(connection: dpsql.Connection) -> None:
    cursor = connection.cursor()
    cursor.execute(BY_AGE, epsilon=0.5)
    cursor.close()
    with pytest.raises(dpsql.InterfaceError, match="closed"):
        cursor.fetchall()
    with pytest.raises(dpsql.InterfaceError, match="closed"):
        cursor.execute(BY_AGE, epsilon=0.5)


def test_optional_and_no_op_methods(connection: dpsql.Connection) -> None:
    cursor = connection.cursor()
    assert cursor.setinputsizes([10]) is None
    assert cursor.setoutputsize(10) is None
    with pytest.raises(dpsql.NotSupportedError):
        cursor.callproc("p")
    with pytest.raises(dpsql.NotSupportedError):
        cursor.nextset()
    assert cursor.lastrowid is None


# -- Type objects and constructors ------------------------------------------------------------------------


def test_type_objects_and_constructors() -> None:
    assert dpsql.STRING == "VARCHAR" and dpsql.NUMBER == "DOUBLE" and dpsql.STRING != dpsql.NUMBER
    assert dpsql.Date(2024, 1, 2) == datetime.date(2024, 1, 2)
    assert dpsql.Time(1, 2, 3) == datetime.time(1, 2, 3)
    assert dpsql.Timestamp(2024, 1, 2, 3, 4, 5) == datetime.datetime(2024, 1, 2, 3, 4, 5)
    assert dpsql.Binary(b"x") == b"x"
    assert isinstance(dpsql.DateFromTicks(0), datetime.date)
    assert isinstance(dpsql.TimeFromTicks(0), datetime.time)
    assert isinstance(dpsql.TimestampFromTicks(0), datetime.datetime)
    assert dpsql.DATETIME == "DATE" and dpsql.BINARY == "BLOB" and dpsql.ROWID == "ROWID"


# -- DuckDB-style shortcuts and reprs --------------------------------------------------------------------


def test_connection_execute_and_sql_return_a_cursor_like_duckdb(connection: dpsql.Connection) -> None:
    with dpsql.testing.noise_disabled():
        cursor = connection.execute("SELECT sex, COUNT(*) AS n FROM t WHERE age > ? GROUP BY sex", (20,), epsilon=0.5)
        assert isinstance(cursor, dpsql.Cursor) and rounded(cursor.fetchall()) == [("F", 1.0), ("M", 1.0)]
        frame = connection.sql(BY_AGE, epsilon=0.5).df()
    assert list(frame.columns) == ["age", "n"] and frame["n"].round(9).tolist() == [3.0, 1.0, 1.0]
    assert connection.budget_spent().statements == 2


def test_fetchnumpy_gives_arrays_by_column_with_nulls_masked(connection: dpsql.Connection) -> None:
    with dpsql.testing.noise_disabled():
        cursor = connection.execute("SELECT sex, age, COUNT(*) AS n FROM t GROUP BY ROLLUP (sex, age)", epsilon=0.5)
    cursor.fetchone()  # like DuckDB's, it takes the rows not fetched yet
    arrays = cursor.fetchnumpy(errors=True)
    assert list(arrays) == ["sex", "age", "n", "n_stderr"]
    assert arrays["sex"].dtype == object and arrays["sex"].tolist()[-1] is None
    assert arrays["age"].dtype == np.int64 and np.ma.is_masked(arrays["age"]) and arrays["age"].mask.tolist() == [False] * 5 + [True] * 3
    assert arrays["n"].dtype == np.float64 and np.round(arrays["n"], 9).tolist()[-1] == 5.0 and (arrays["n_stderr"] > 0).all()
    with pytest.raises(dpsql.ProgrammingError, match="distinct column names"):
        connection.execute("SELECT COUNT(*), COUNT(*) FROM t", epsilon=0.5).fetchnumpy()


def test_reprs_say_what_a_connection_and_a_cursor_hold(connection: dpsql.Connection) -> None:
    assert repr(connection) == "<dpsql.Connection tables: t; budget epsilon=100 (100 left); ledger: in memory; laplace noise>"
    cursor = connection.cursor()
    assert repr(cursor) == "<dpsql.Cursor (no result yet: call execute())>"
    cursor.execute(BY_AGE, epsilon=0.5)
    cursor.fetchone()
    assert repr(cursor) == "<dpsql.Cursor 3 row(s) of (age, n), 1 fetched>"
    assert repr(connection.workload([BY_AGE], epsilon=0.5)[0]) == "<dpsql.ResultSet 3 row(s) of (age, n)>"
    assert "(99.5 left)" in repr(connection)  # the batch was answered from the kept measurement, free
    connection.close()
    assert repr(connection) == "<dpsql.Connection (closed)>" and repr(cursor) == "<dpsql.Cursor (closed)>"


def test_executemany_takes_any_iterable_of_parameters(connection: dpsql.Connection) -> None:
    with dpsql.testing.noise_disabled():
        cursor = connection.cursor().executemany("SELECT COUNT(*) AS n FROM t WHERE sex = ?", ((s,) for s in "FM"), epsilon=0.5)
    assert rounded(cursor.fetchall()) == [(3.0,), (2.0,)]
    with pytest.raises(dpsql.ProgrammingError, match="at least one parameter sequence"):
        connection.cursor().executemany("SELECT COUNT(*) FROM t WHERE sex = ?", iter(()), epsilon=0.5)


@pytest.mark.parametrize("call", ["execute", "executemany"])
def test_an_unknown_keyword_is_a_programming_error(call: str) -> None:
    """``execute(..., delta=1e-5)`` raised Python's TypeError, outside the DB-API's exception classes."""
    cursor = dpsql.connect(budget=dpsql.Budget(epsilon=1.0)).cursor()
    arguments = ("SELECT 1",) if call == "execute" else ("SELECT 1", [])
    with pytest.raises(dpsql.ProgrammingError, match=r"takes epsilon=, rho= and non_negative=, not delta= \(δ is set on the connection"):
        getattr(cursor, call)(*arguments, epsilon=1.0, delta=1e-5)


@pytest.mark.parametrize(("given", "expected"), [
    ({"epsilon": 2.0, "delta": 1e-6}, dpsql.Budget(2.0, 1e-6)),
    ({"epsilon": 2}, dpsql.Budget(2.0)),
    (3, dpsql.Budget(3.0)),
    (dpsql.Budget(1.5, 1e-7), dpsql.Budget(1.5, 1e-7)),
])
def test_a_budget_may_be_written_as_a_mapping_or_a_number(given, expected):
    assert dpsql.connect(budget=given).budget == expected


@pytest.mark.parametrize(("given", "says"), [
    ({"eps": 1.0}, "keys epsilon and, optionally, delta"),
    ({"epsilon": 1.0, "delta": 1e-6, "rho": 0.1}, "keys epsilon and, optionally, delta"),
    (True, "not bool"),
    ("1.0", "not str"),
    ({"epsilon": -1.0}, "epsilon"),
])
def test_a_budget_in_another_form_is_refused_in_one_line(given, says):
    with pytest.raises(dpsql.ProgrammingError, match=says) as raised:
        dpsql.connect(budget=given)
    assert "\n" not in str(raised.value)
