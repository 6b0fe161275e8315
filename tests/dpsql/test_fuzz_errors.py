"""Only dpsql exceptions escape the public API: a seeded hypothesis fuzz over SQL text,
schemas and API parameters.

Every case builds what it needs through the public API (``dpsql.connect``, ``register``, ``execute``,
``workload``, ``Schema.load``, ``Budget``) and may raise only :class:`dpsql.Error` subclasses. The
runs are derandomized (the same cases every time) and kept fast: 3,300 cases in all, about 35 s of
one core. No other exception is tolerated: the crashes it once found have minimal reproducers in
:mod:`test_crashes`, all fixed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql
import dpsql.testing



def fuzz_settings(cases: int) -> settings:
    return settings(
        max_examples=cases, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=True
    )

FRAME = pd.DataFrame(
    {
        "pid": [1, 1, 2, 3, 3, 3, 4, 5],
        "sex": ["F", "M", "F", "F", None, "M", "M", "F"],
        "age": [20, 21, 22, 90, 17, 30, 44, 150],
        "income": [0.0, 5.5, 10.0, 99.0, 1e9, -1.0, 50.0, 7.25],
        "job": ["a", "b", None, "c", "a", "a", "b", "z"],
        "flag": [True, False, True, True, False, None, True, False],
        "browser": ["x", "y", "x", "'q\"", "x", "y", "z", "x"],
    }
)
COLUMNS = list(FRAME.columns)
SCHEMA = {
    "privacy_unit": "pid",
    "max_rows_per_unit": 2,
    "max_groups_per_unit": 2,
    "columns": {
        "sex": {"categories": ["F", "M"]},
        "age": {"range": [17, 90]},
        "income": {"bins": [0, 10, 100, 1000]},
        "job": {"categories": ["a", "b", "c"], "nullable": True},
        "flag": {"categories": [False, True]},
        "browser": "unknown",
    },
}


def only_dpsql_errors(action: Callable[[], object], case: str = "") -> None:
    """Run ``action``; any exception but a dpsql one fails the test (``case`` describes the input)."""
    try:
        action()
    except dpsql.Error:
        pass
    except Exception as error:  # noqa: BLE001 - the point of the test
        raise AssertionError(f"{type(error).__name__} escaped the public API on {case!r}: {error!r}") from error


# -- values that break numbers -----------------------------------------------------------------------------

ODD_NUMBERS = st.sampled_from(
    [0, -1, 1, 2, 10**400, -(10**400), 1e300, -1e300, 5e-324, 1e-320, 1e-12, math.inf, -math.inf, math.nan, 0.5, 1e9, 2**63,
     True, False, None, "1", "nan", [1], {}, 1.0, 3]
)
NUMBERS = st.one_of(ODD_NUMBERS, st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(10**30), max_value=10**30))
SCALARS = st.one_of(NUMBERS, st.text(max_size=12), st.booleans(), st.none())


# -- schemas -------------------------------------------------------------------------------------------------

COLUMN_SPECS = st.one_of(
    st.just("unknown"),
    st.none(),
    st.fixed_dictionaries({"categories": st.lists(SCALARS, max_size=5)}, optional={"nullable": SCALARS}),
    st.fixed_dictionaries({"range": st.lists(NUMBERS, max_size=3)}, optional={"nullable": SCALARS}),
    st.fixed_dictionaries({"bins": st.lists(NUMBERS, max_size=5)}, optional={"nullable": SCALARS}),
    st.dictionaries(st.text(max_size=8), SCALARS, max_size=3),
    SCALARS,
)
SCHEMA_DOCUMENTS = st.fixed_dictionaries(
    {"columns": st.dictionaries(st.sampled_from(COLUMNS + ["nope", ""]), COLUMN_SPECS, max_size=4)},
    optional={
        "privacy_unit": st.one_of(st.sampled_from(COLUMNS + ["nope"]), SCALARS),
        "max_rows_per_unit": NUMBERS,
        "max_groups_per_unit": NUMBERS,
        "max_rows_per_group": NUMBERS,
        "other": SCALARS,
    },
)
SCHEMA_SOURCES = st.one_of(
    SCHEMA_DOCUMENTS,
    SCHEMA_DOCUMENTS.map(lambda d: json.dumps(d, default=str)),  # JSON text, often longer than a file name
    st.text(max_size=300),
    st.sampled_from(["x.yaml", "/", "schema.json", "\x00", "a" * 300, "{", "[1, 2]", "- a\n- b", "columns: 3"]),
    SCALARS,
)


@fuzz_settings(1500)
@given(SCHEMA_SOURCES)
def test_schemas_raise_only_dpsql_errors(source: object) -> None:
    only_dpsql_errors(lambda: dpsql.Schema.load(source))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def fuzz_connection() -> Iterator[dpsql.Connection]:
    """One connection for many cases (opening DuckDB costs 30 ms); a table re-registered is replaced."""
    connection = dpsql.connect(budget=dpsql.Budget(1e9, 1e-3), reuse=False)
    connection.register("t", FRAME, schema=SCHEMA)
    yield connection
    connection.close()


@fuzz_settings(600)
@given(schema=SCHEMA_DOCUMENTS)
def test_registering_any_schema_raises_only_dpsql_errors(fuzz_connection: dpsql.Connection, schema: dict) -> None:
    def register() -> None:
        fuzz_connection.register("fuzzed", FRAME, schema=schema)
        fuzz_connection.cursor().execute("SELECT COUNT(*) FROM fuzzed", epsilon=0.1)

    only_dpsql_errors(register)


# -- API parameters ----------------------------------------------------------------------------------------


@fuzz_settings(500)
@given(
    budget=st.one_of(st.just((100.0, 1e-6)), st.tuples(NUMBERS, NUMBERS)),
    cost=st.sampled_from(["epsilon", "rho", "default_epsilon"]),
    value=st.one_of(st.just(0.5), NUMBERS),
    noise=st.sampled_from(["laplace", "gaussian", "other"]),
    extra=st.sampled_from(["selection_delta", "weights", "fetchmany", "non_negative", "executemany", "none"]),
    extra_value=st.one_of(
        SCALARS, st.lists(st.one_of(st.just(1.0), NUMBERS), min_size=2, max_size=2), st.lists(st.lists(SCALARS, max_size=2), max_size=2)
    ),
)
def test_parameters_raise_only_dpsql_errors(budget: tuple, cost: str, value: object, noise: str, extra: str, extra_value: object) -> None:
    def run() -> None:
        options = {"default_epsilon": value} if cost == "default_epsilon" else {}
        with dpsql.connect(budget=dpsql.Budget(*budget), noise=noise, **options) as connection:
            connection.register("t", FRAME, schema=SCHEMA)
            asked = {} if cost == "default_epsilon" else {cost: value}
            cursor = connection.cursor()
            if extra == "selection_delta":
                connection.selection_delta = extra_value
                cursor.execute("SELECT browser, COUNT(*) FROM t GROUP BY browser", **asked)
            elif extra == "weights":
                connection.workload(["SELECT sex, COUNT(*) FROM t GROUP BY sex", "SELECT age, COUNT(*) FROM t GROUP BY age"],
                                    weights=extra_value, **asked)
            elif extra == "non_negative":
                cursor.execute("SELECT sex, COUNT(*) FROM t GROUP BY sex", non_negative=extra_value, **asked)
            elif extra == "executemany":
                cursor.executemany("SELECT job, COUNT(*) FROM t WHERE sex = ? GROUP BY job", extra_value, **asked)
            else:
                cursor.execute("SELECT job, COUNT(*) FROM t GROUP BY job", **asked)
                cursor.fetchmany(extra_value) if extra == "fetchmany" else cursor.fetchall()

    only_dpsql_errors(run, f"{extra}: {extra_value!r}")


# -- SQL text ------------------------------------------------------------------------------------------------

IDENTIFIERS = st.sampled_from(COLUMNS + ["nope", '"sex"', "t.sex", "*", "1", "sex AS s", '"we""ird"'])
LITERALS = st.one_of(
    st.integers(min_value=-(10**25), max_value=10**25).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["'F'", "'it''s'", "''", "NULL", "TRUE", "1e400", "-0", "'\\'", "?", "DATE '2020-01-01'", "'nan'", "x'00'"]),
)
COMPARISONS = st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "!=", "IN", "NOT IN", "BETWEEN", "IS", "IS NOT", "LIKE"])


@st.composite
def predicates(draw: st.DrawFn, depth: int = 0) -> str:
    column, comparison = draw(IDENTIFIERS), draw(COMPARISONS)
    if comparison in ("IN", "NOT IN"):
        atom = f"{column} {comparison} ({', '.join(draw(st.lists(LITERALS, max_size=3)))})"
    elif comparison == "BETWEEN":
        atom = f"{column} BETWEEN {draw(LITERALS)} AND {draw(LITERALS)}"
    else:
        atom = f"{column} {comparison} {draw(LITERALS)}"
    if depth < 2 and draw(st.booleans()):
        return f"({atom} {draw(st.sampled_from(['AND', 'OR']))} {draw(predicates(depth + 1))})"
    return ("NOT " if draw(st.booleans()) else "") + atom


@st.composite
def statements(draw: st.DrawFn) -> str:
    keys = draw(st.lists(IDENTIFIERS, max_size=3))
    aggregate = draw(st.sampled_from(["COUNT(*)", "COUNT()", "COUNT(job)", "COUNT(DISTINCT sex)", "SUM(age)", "COUNT(*) AS n", "count(1)", ""]))
    select = ", ".join([*keys, aggregate] if aggregate else keys) or "*"
    sql = f"SELECT {select} FROM {draw(st.sampled_from(['t', 'T', 'nope', 't AS x', '(SELECT 1)', 't, t']))}"
    if draw(st.booleans()):
        sql += f" WHERE {draw(predicates())}"
    grouping = draw(st.sampled_from(["", "GROUP BY {k}", "GROUP BY CUBE ({k})", "GROUP BY ROLLUP ({k})", "GROUP BY GROUPING SETS (({k}), ())"]))
    if grouping and keys:
        sql += " " + grouping.format(k=", ".join(keys))
    if draw(st.booleans()):
        sql += f" HAVING COUNT(*) > {draw(LITERALS)}"
    if draw(st.booleans()):
        sql += f" ORDER BY {draw(IDENTIFIERS)} {draw(st.sampled_from(['', 'DESC', 'ASC NULLS FIRST']))}"
    if draw(st.booleans()):
        sql += f" LIMIT {draw(LITERALS)}"
    if draw(st.integers(0, 9)) == 0:
        sql = f"{sql} UNION ALL {sql}"
    if draw(st.integers(0, 9)) == 0:
        sql = "EXPLAIN " + sql
    return sql


SQL_TEXTS = st.one_of(statements(), statements().map(lambda s: s + ";"), st.text(max_size=60), st.text(alphabet="SELECT COUNT(*)FROM tWHERE=?'\";,", max_size=60))


@fuzz_settings(1000)
@given(sql=SQL_TEXTS, parameters=st.one_of(st.none(), st.lists(SCALARS, max_size=3), SCALARS))
def test_sql_raises_only_dpsql_errors(fuzz_connection: dpsql.Connection, sql: str, parameters: object) -> None:
    with dpsql.testing.seeded(0):
        only_dpsql_errors(lambda: fuzz_connection.cursor().execute(sql, parameters, epsilon=0.5), sql)
