"""Schemas written with numpy and pandas values work like the same schema in plain Python, and no
declared value can make a statement fail after its rows were read; float categories on floating-point
columns are refused, never matched by luck.

The property test draws schemas (valid and invalid) of plain Python values, writes each one three ways —
Python scalars, numpy scalars and arrays, values taken out of pandas objects (``pd.Timestamp``, numpy
scalars from a Series) — and asserts identical answers with the noise off and identical refusals."""

from __future__ import annotations

import datetime
import decimal

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql
import dpsql.testing
from dpsql.errors import DatabaseError
from dpsql.schema import Schema
from dpsql.schema_values import canonical_value, canonical_values
from dpsql.sql.literals import ColumnType, check_literals, sql_literal

ROWS = 240
DAYS = [datetime.date(2024, 1, 1) + datetime.timedelta(days=d) for d in range(4)]
STAMPS = [datetime.datetime(2024, 3, 1, 8 + h) for h in range(3)]


def frame() -> pd.DataFrame:
    rng = np.random.default_rng(28)
    return pd.DataFrame(
        {
            "unit": np.arange(ROWS),  # one row per unit: no bound ever drops a row, so answers are the same each time
            "sex": rng.choice(["F", "M"], ROWS),
            "race": rng.integers(0, 5, ROWS),
            "age": rng.integers(17, 91, ROWS),
            "income": np.round(rng.lognormal(10, 1, ROWS), 2),
            "day": [DAYS[i % 4] for i in range(ROWS)],
            "stamp": [STAMPS[i % 3] for i in range(ROWS)],
        }
    )


FRAME = frame()


def released(schema: dict[str, object], sql: str) -> object:
    """The noise-free rows of ``sql`` on ``FRAME`` under ``schema``, or the refusal (class and message)."""
    connection = dpsql.connect(budget=dpsql.Budget(1e6))
    try:
        connection.register("t", FRAME, schema=schema)
        with dpsql.testing.noise_disabled():
            rows = connection.cursor().execute(sql, epsilon=1.0).fetchall()
        return [tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows]
    except dpsql.Error as error:
        return (type(error).__name__, str(error))
    finally:
        connection.close()


# -- the examples ----------------------------------------------------------------------------------


def duckdb_counts(sql: str) -> dict[object, float]:
    database = duckdb.connect()
    database.register("t", FRAME)
    return {row[0]: float(row[1]) for row in database.execute(sql).fetchall()}


def test_numpy_bins_give_the_python_answer_and_duckdbs() -> None:
    """np.float64 edges were rendered into the SQL as ``np.float64(-5.0)``: every statement failed after the charge."""
    edges = list(np.linspace(0, 200_000, 5))
    assert all(type(edge) is np.float64 for edge in edges)
    sql = "SELECT income, COUNT(*) FROM t GROUP BY income"
    numpy_rows = released({"privacy_unit": "unit", "max_rows_per_unit": 2, "columns": {"income": {"bins": edges}}}, sql)
    python_rows = released({"privacy_unit": "unit", "max_rows_per_unit": 2, "columns": {"income": {"bins": [float(e) for e in edges]}}}, sql)
    assert numpy_rows == python_rows
    truth = duckdb_counts("SELECT CAST(FLOOR(income / 50000) AS INT) AS b, COUNT(*) FROM t WHERE income < 200000 GROUP BY b")
    assert [row[1] for row in numpy_rows] == pytest.approx([truth.get(b, 0.0) for b in range(4)])  # type: ignore[union-attr]
    assert numpy_rows[0][0] == "[0, 50000)"  # type: ignore[index]


@pytest.mark.parametrize(
    "columns",
    [
        {"race": {"categories": list(np.arange(5))}},  # was: category np.int64(0) is not a string, number, boolean or date
        {"race": {"categories": np.arange(5, dtype=np.uint8)}},
        {"age": {"range": [np.int64(17), np.int64(90)]}},  # was: range must be [lo, hi] with two integers or two dates
        {"age": {"range": [np.int32(17), 90], "bounds": [np.float32(17), np.int16(90)]}},
        {"day": {"range": [np.datetime64("2024-01-01"), np.datetime64("2024-01-04")]}},
        {"day": {"categories": np.array(DAYS, dtype="datetime64[D]")}},
        {"stamp": {"categories": [pd.Timestamp(s) for s in STAMPS]}},
        {"stamp": {"categories": list(np.array(STAMPS, dtype="datetime64[ns]"))}},
        {"sex": {"categories": list(np.array(["F", "M"])), "nullable": np.bool_(False)}},
    ],
)
def test_schemas_built_from_data_register_and_answer_like_python(columns: dict[str, dict[str, object]]) -> None:
    name = next(iter(columns))
    python = {column: {key: _python(value) for key, value in spec.items()} for column, spec in columns.items()}
    sql = f"SELECT {name}, COUNT(*) FROM t GROUP BY {name}"
    numpy_rows = released({"privacy_unit": "unit", "max_rows_per_unit": np.int64(2), "columns": columns}, sql)
    assert isinstance(numpy_rows, list) and numpy_rows == released({"privacy_unit": "unit", "max_rows_per_unit": 2, "columns": python}, sql)
    assert sum(row[1] for row in numpy_rows) == pytest.approx(ROWS)  # type: ignore[misc]


def _python(value: object) -> object:
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_python(v) for v in value]
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    if isinstance(value, np.datetime64):
        unit = np.datetime_data(value.dtype)[0]
        return value.astype("datetime64[D]" if unit == "D" else "datetime64[us]").item()
    return value.item() if isinstance(value, np.generic) else value


def test_canonical_values() -> None:
    assert canonical_values(np.array([1, 2], dtype=np.int8)) == (1, 2)
    assert [type(v) for v in canonical_values([np.float32(0.5), np.int64(3), np.bool_(True), np.str_("a")])] == [float, int, bool, str]
    assert canonical_value(np.datetime64("2024-05-06T07:08:09.123456")) == datetime.datetime(2024, 5, 6, 7, 8, 9, 123456)
    assert canonical_value(np.datetime64("2024-05", "M")) == datetime.date(2024, 5, 1)
    assert canonical_value(np.datetime64("NaT")) is None and canonical_value(pd.NaT) is None
    assert type(canonical_value(pd.Timestamp("2024-01-01 10:00"))) is datetime.datetime
    assert isinstance(canonical_value(np.datetime64("2024-01-01T00:00:00.000000001")), np.datetime64)  # no datetime holds it
    assert canonical_values(np.zeros((2, 2))).shape == (2, 2)  # type: ignore[union-attr]  # left for the checks to refuse
    assert canonical_values([decimal.Decimal("2.00"), decimal.Decimal("0.25")]) == (2, 0.25)


def test_literals_are_rendered_from_the_plain_value() -> None:
    assert sql_literal(np.float64(-5.0)).sql() == "-5.0"
    assert sql_literal(np.int64(7)).sql() == "7" and sql_literal(np.bool_(True)).sql() == "TRUE"
    assert sql_literal(np.float32(0.1)).sql() == "0.10000000149011612"


def test_an_engine_that_rejects_a_declared_literal_refuses_it_at_register() -> None:
    """The range ends, bin edges and bounds go through the engine at register, one query per table: a
    literal it cannot parse or reads as another number is refused then, naming the column. 32-bit integer
    ends of a BIGINT column compare as themselves and are not asked."""
    schema = Schema.load({"columns": {"income": {"bins": [0, 1e305]}, "age": {"range": [17, 90], "bounds": [17, 90]}}})
    types = {"income": ColumnType.of("DOUBLE", "duckdb"), "age": ColumnType.of("BIGINT", "duckdb")}
    queries: list[str] = []

    def run(sql: str) -> dict[str, np.ndarray]:
        queries.append(sql)
        return {name: np.array([value]) for name, value in duckdb.sql(sql).fetchnumpy().items()}

    check_literals(schema.columns, types, "t", run, "duckdb")
    assert len(queries) == 1 and "CAST(NULL AS DOUBLE) < 1e+305" in queries[0] and "CAST(NULL AS BIGINT)" not in queries[0]

    def rejecting(sql: str) -> dict[str, np.ndarray]:
        if "1e+305" in sql:
            raise DatabaseError("Conversion Error: 1e+305 is out of range")
        return run(sql)

    with pytest.raises(dpsql.ProgrammingError, match=r"column 'income' of 't' has type DOUBLE; the engine cannot compare it with .*out of range"):
        check_literals(schema.columns, types, "t", rejecting, "duckdb")

    def rounding(sql: str) -> dict[str, np.ndarray]:
        with np.errstate(over="ignore"):
            return {name: (values.astype(np.float32) if name.startswith("v") else values) for name, values in run(sql).items()}

    with pytest.raises(dpsql.ProgrammingError, match=r"reads its declared value 1e\+305 as inf"):
        check_literals(schema.columns, types, "t", rounding, "duckdb")


def test_bounds_whose_width_overflows_are_refused_at_register() -> None:
    """bounds [-1e308, 1e308] registered, and every SUM then failed after the charge (the grid's width is inf)."""
    connection = dpsql.connect(budget=dpsql.Budget(10.0))
    with pytest.raises(dpsql.ProgrammingError, match=r"bounds \[-1e\+308, 1e\+308\] lie beyond ±2\^53"):
        connection.register("t", FRAME, schema={"privacy_unit": None, "columns": {"income": {"bounds": [-1e308, np.float64(1e308)]}}})


def test_deeply_nested_schema_text_is_a_programming_error() -> None:
    """yaml.safe_load and json.loads raised RecursionError."""
    for text in ("columns:\n  x: " + "[" * 600 + "]" * 600, '{"columns": {"x": ' + "[" * 5000 + "]" * 5000 + "}}"):
        with pytest.raises(dpsql.ProgrammingError, match="nests too deeply"):
            Schema.load(text)
    deep: list[object] = []
    for _ in range(3000):
        deep = [deep]
    with pytest.raises(dpsql.ProgrammingError, match=r"category \[\[\[\[...\]\]\]\] is not a string"):
        Schema.load({"columns": {"x": {"categories": deep}}})


# -- float categories ------------------------------------------------------------------------------------------


def test_fractional_categories_on_a_double_column_are_refused_with_bins_to_declare() -> None:
    """categories [0.1, 0.3] on data 0.1 + 0.2 counted the 0.3 cell as one row where there are two."""
    data = pd.DataFrame({"p": [0.1, 0.1 + 0.2, 0.3, 0.1]})
    connection = dpsql.connect(budget=dpsql.Budget(100.0))
    with pytest.raises(dpsql.ProgrammingError, match=r"category 0.1 is not a whole number.* declare bins around the values instead \(bins: \[0, 0.2, 0.4\]\)"):
        connection.register("t", data, schema={"privacy_unit": None, "columns": {"p": {"categories": [0.1, 0.3]}}})
    connection.register("t", data, schema={"privacy_unit": None, "columns": {"p": {"bins": [0, 0.2, 0.4]}}})  # what it advises
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute("SELECT p, COUNT(*) FROM t GROUP BY p", epsilon=1.0).fetchall()
    assert [(label, round(count, 9)) for label, count in rows] == [("[0, 0.2)", 2.0), ("[0.2, 0.4)", 2.0)]


def test_whole_number_categories_on_a_double_column_and_fractions_on_a_decimal_column_count_exactly() -> None:
    connection = dpsql.connect(budget=dpsql.Budget(100.0))
    connection.register("d", pd.DataFrame({"p": [1.0, 2.0, 2.0]}), schema={"privacy_unit": None, "columns": {"p": {"categories": [1.0, 2]}}})
    exact = [decimal.Decimal("0.1"), decimal.Decimal("0.1") + decimal.Decimal("0.2"), decimal.Decimal("0.3")]
    connection.register("x", pa.table({"p": pa.array(exact, type=pa.decimal128(10, 2))}), schema={"privacy_unit": None, "columns": {"p": {"categories": [0.1, 0.3]}}})
    with dpsql.testing.noise_disabled():
        doubles = connection.cursor().execute("SELECT p, COUNT(*) FROM d GROUP BY p", epsilon=1.0).fetchall()
        decimals = connection.cursor().execute("SELECT p, COUNT(*) FROM x GROUP BY p", epsilon=1.0).fetchall()
    assert [(label, round(count, 9)) for label, count in doubles] == [(1.0, 1.0), (2, 2.0)]
    assert [(label, round(count, 9)) for label, count in decimals] == [(0.1, 1.0), (0.3, 2.0)]


# -- the property -------------------------------------------------------------------------------------------


def _numpy(value: object, pick: int) -> object:
    """``value`` as a numpy scalar of a type that holds it exactly (``pick`` chooses among them)."""
    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, int):
        holders = [t for t in (np.int64, np.int32, np.int16, np.uint16, np.uint64) if np.iinfo(t).min <= value <= np.iinfo(t).max]
        return holders[pick % len(holders)](value)
    if isinstance(value, float):
        with np.errstate(over="ignore"):
            holders = [t for t in (np.float64, np.float32, np.float16) if float(t(value)) == value]
        return holders[pick % len(holders)](value)
    if isinstance(value, datetime.datetime):
        return np.datetime64(value, "us" if pick % 2 else "ns")
    if isinstance(value, datetime.date):
        return np.datetime64(value, "D")
    return np.str_(value) if isinstance(value, str) else value


def _pandas(value: object) -> object:
    """``value`` as pandas hands it out of a Series (numpy scalars, ``Timestamp`` for a datetime)."""
    if isinstance(value, datetime.datetime):
        return pd.Timestamp(value)
    if isinstance(value, (bool, int, float, str)):
        return pd.Series([value]).iloc[0]
    return value


def written(schema: dict[str, object], how: str, pick: int) -> dict[str, object]:
    """``schema`` with every declared value written the ``how`` way (lists as arrays, sometimes, for numpy)."""
    if how == "python":
        return schema
    convert = (lambda v: _numpy(v, pick)) if how == "numpy" else _pandas
    document: dict[str, object] = {key: convert(value) if key != "columns" else value for key, value in schema.items()}
    columns = {}
    for name, spec in schema["columns"].items():  # type: ignore[attr-defined]
        out = {}
        for key, value in spec.items():
            if isinstance(value, list):
                values = [convert(v) for v in value]
                homogeneous = len({type(v) for v in values}) == 1 and not isinstance(values[0], pd.Timestamp)
                out[key] = np.array(values) if how == "numpy" and pick % 3 == 0 and homogeneous else values
            else:
                out[key] = convert(value)
        columns[name] = out
    document["columns"] = columns
    return document


NUMBERS = st.one_of(st.integers(-3, 95), st.sampled_from([0.5, 17.0, 30.25, 1e4, 2.5e4, 1e5, 1e6, 1e305, -1.0]))


def mostly_sorted(values: st.SearchStrategy[list[object]]) -> st.SearchStrategy[list[object]]:
    """Lists of ``values``, sorted three times in four (an unsorted list is refused)."""
    return st.tuples(values, st.integers(0, 3)).map(lambda drawn: drawn[0] if drawn[1] == 0 else sorted(drawn[0]))  # type: ignore[type-var]


PAIRS = mostly_sorted(st.lists(NUMBERS, min_size=2, max_size=2, unique=True))
SPECS = {
    "sex": st.fixed_dictionaries({"categories": st.lists(st.sampled_from(["F", "M", "X"]), max_size=3, unique=True)}, optional={"nullable": st.booleans()}),
    "race": st.one_of(
        st.fixed_dictionaries({"categories": st.lists(st.one_of(st.integers(-1, 5), st.sampled_from([1.5, 2.0])), min_size=1, max_size=5)}),
        st.fixed_dictionaries({"range": mostly_sorted(st.lists(st.integers(-2, 6), min_size=2, max_size=2))}),
    ),
    "age": st.one_of(
        st.fixed_dictionaries({"range": mostly_sorted(st.lists(st.integers(0, 100), min_size=2, max_size=2))}, optional={"bounds": PAIRS}),
        st.fixed_dictionaries({"bins": mostly_sorted(st.lists(NUMBERS, min_size=2, max_size=5, unique=True))}),
        st.fixed_dictionaries({"bounds": PAIRS}),
    ),
    "income": st.fixed_dictionaries({"bins": mostly_sorted(st.lists(NUMBERS, min_size=1, max_size=5, unique=True))}, optional={"bounds": PAIRS}),
    "day": st.one_of(
        st.fixed_dictionaries({"categories": st.lists(st.sampled_from(DAYS), min_size=1, max_size=4, unique=True)}),
        st.fixed_dictionaries({"range": mostly_sorted(st.lists(st.sampled_from(DAYS), min_size=2, max_size=2))}),
    ),
    "stamp": st.fixed_dictionaries({"categories": st.lists(st.sampled_from(STAMPS + [datetime.datetime(2024, 3, 1, 8, 30)]), min_size=1, max_size=3)}),
}
STATEMENTS = {
    "sex": "SELECT sex, COUNT(*) FROM t GROUP BY sex",
    "race": "SELECT race, COUNT(*) FROM t GROUP BY race",
    "age": "SELECT COUNT(*), SUM(age) FROM t",
    "income": "SELECT income, COUNT(*), AVG(income) FROM t GROUP BY income",
    "day": "SELECT day, COUNT(*) FROM t GROUP BY day",
    "stamp": "SELECT stamp, COUNT(*) FROM t GROUP BY stamp",
}


@st.composite
def schemas(draw: st.DrawFn) -> tuple[dict[str, object], str]:
    names = draw(st.lists(st.sampled_from(sorted(SPECS)), min_size=1, max_size=2, unique=True))
    columns = {name: draw(SPECS[name]) for name in names}
    unit = draw(st.sampled_from(["unit", "unit", None]))
    rows = draw(st.integers(1, 3) if unit else st.sampled_from([1, 1, 1, 2]))  # 2 without a unit is refused
    document = {"privacy_unit": unit, "max_rows_per_unit": rows, "columns": columns}
    return document, STATEMENTS[names[0]]


@settings(max_examples=20, derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), st.integers(0, 5))
def test_numpy_python_and_pandas_schemas_give_identical_answers_and_refusals(drawn: tuple[dict[str, object], str], pick: int) -> None:
    schema, sql = drawn
    python = released(schema, sql)
    assert released(written(schema, "numpy", pick), sql) == python
    assert released(written(schema, "pandas", pick), sql) == python
    if isinstance(python, tuple):  # a refusal: never after a read
        assert python[0] in ("ProgrammingError", "NotSupportedError"), python
