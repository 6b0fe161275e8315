"""The same private queries on DuckDB, PostgreSQL and Spark.

PostgreSQL tests need a server: ``eval "$(bash .ci/services.sh)"`` starts one on loopback and exports
``DPSQL_TEST_POSTGRES_DSN``; each test session loads its tables (COPY) into a schema of its own.
Spark tests run pyspark in local mode (one SparkSession per test process). When an engine is
missing the tests skip with the reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import datetime
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot

import dpsql
import dpsql.sql.dialect
import dpsql.testing
from dpsql.backends.dbapi import DBAPIBackend
from dpsql.backends.dialects import POSTGRES, SPARK, STOCK_DIALECTS
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.factory import open_backend
from dpsql.schema import Schema
from dpsql.sql.bounded import BoundedAggregation
from dpsql.sql.literals import ColumnType
from conftest import ADULT_SCHEMA, adult_corpus
import engines
from recording_backend import RecordingBackend

GRAMMAR_ACCEPTED = Path(__file__).resolve().parents[2] / "grammar" / "accepted"
ACCEPTED = adult_corpus(GRAMMAR_ACCEPTED)  # plain, workloads/ (CUBE, ROLLUP, UNION ALL), unknown/


def statement_id(path: Path) -> str:
    return str(path.relative_to(GRAMMAR_ACCEPTED).with_suffix(""))


#: the adult schema with bounds no person reaches (≤ 3 rows, ≤ 3 browsers): bounding keeps every row,
#: so the exact answers cannot depend on which rows an engine's hash would have dropped
UNBOUNDED_ADULT_SCHEMA = {**ADULT_SCHEMA, "max_groups_per_unit": 3}
ENGINES = ("duckdb", "postgres", "spark")
ENGINE_NAMES = {"duckdb": "DuckDB", "postgres": "PostgreSQL", "spark": "Spark"}
UNITS = 3000  # privacy units of the `visits` table, 3 rows each (slots 0, 1, 2)
VISITS_SCHEMA: dict[str, object] = {
    "privacy_unit": "unit_id",
    "max_rows_per_unit": 1,
    "columns": {"slot": {"categories": [0, 1, 2]}},
}
pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")


def no_nan(frame: pd.DataFrame) -> pd.DataFrame:
    """Missing values as None (NULL in every engine), not the string 'nan'."""
    return frame.astype(object).where(frame.notna(), None)


def visits_frame() -> pd.DataFrame:
    return pd.DataFrame({"unit_id": np.repeat(np.arange(UNITS), 3), "slot": np.tile(np.arange(3), UNITS)})


def slots_frame() -> pd.DataFrame:
    """A public table the visits join on their slot (slot 2 listed twice: a fan-out of 2)."""
    return pd.DataFrame({"slot": [0, 1, 2, 2], "half": ["low", "low", "high", "top"]})


def text_age_frame(adult: pd.DataFrame) -> pd.DataFrame:
    """The adult table with `age` stored as text: a type mismatch for its integer-range domain."""
    return adult.assign(age=adult["age"].astype(str))


# -- engines ---------------------------------------------------------------------------------------
POSTGRES_POISON = "CASE WHEN person_id > 0 THEN (1 / (person_id - person_id))::text ELSE sex END"
POSTGRES_STALL = "CASE WHEN person_id = 1 AND pg_sleep(60)::text = '' THEN sex ELSE sex END"
SPARK_POISON = "CASE WHEN person_id > 0 THEN raise_error('poisoned row read') ELSE sex END"
DUCKDB_POISON = "CASE WHEN person_id > 0 THEN error('poisoned row read') ELSE sex END"
POISONED_COLUMNS = "person_id, {poison} AS sex, race, age, income, job, browser"


def _postgres_create(connection: object, name: str, frame: pd.DataFrame) -> None:
    columns = ", ".join(f'"{c}" {"bigint" if frame[c].dtype.kind in "iu" else "text"}' for c in frame.columns)
    connection.execute(f'CREATE TABLE "{name}" ({columns})')  # type: ignore[attr-defined]
    with connection.cursor().copy(f'COPY "{name}" FROM STDIN') as copy:  # type: ignore[attr-defined]
        for row in no_nan(frame).itertuples(index=False):
            copy.write_row(row)


@pytest.fixture(scope="session")
def postgres_dsn(adult_frame: pd.DataFrame) -> Iterator[str]:
    """A DSN whose search_path is a fresh schema holding adult, visits, adult_text_age and poisoned."""
    dsn = engines.postgres_dsn()
    import psycopg

    schema = f"dpsql_test_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        admin.execute(f"SET search_path TO {schema}")
        _postgres_create(admin, "adult", adult_frame)
        _postgres_create(admin, "visits", visits_frame())
        _postgres_create(admin, "slots", slots_frame())
        _postgres_create(admin, "adult_text_age", text_age_frame(adult_frame))
        admin.execute(f"CREATE VIEW poisoned AS SELECT {POISONED_COLUMNS.format(poison=POSTGRES_POISON)} FROM adult")
        admin.execute(f"CREATE VIEW stalled AS SELECT {POISONED_COLUMNS.format(poison=POSTGRES_STALL)} FROM adult")
    separator = "&" if "?" in dsn else "?"
    yield f"{dsn}{separator}options={urllib.parse.quote(f'-csearch_path={schema}')}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(scope="session")
def spark(adult_frame: pd.DataFrame) -> Iterator[object]:
    """One local SparkSession per test process, with the same tables as temporary views."""
    session = engines.local_spark_session("dpsql-tests")
    for name, frame in (("adult", adult_frame), ("visits", visits_frame()), ("slots", slots_frame()), ("adult_text_age", text_age_frame(adult_frame))):
        session.createDataFrame(no_nan(frame)).cache().createOrReplaceTempView(name)
    session.sql(f"CREATE OR REPLACE TEMP VIEW poisoned AS SELECT {POISONED_COLUMNS.format(poison=SPARK_POISON)} FROM adult")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def duckdb_database(adult_frame: pd.DataFrame) -> Iterator[duckdb.DuckDBPyConnection]:
    """An existing DuckDB database holding the same tables (registered by name, like the others)."""
    connection = duckdb.connect()
    for name, frame in (("adult", adult_frame), ("visits", visits_frame()), ("slots", slots_frame()), ("adult_text_age", text_age_frame(adult_frame))):
        connection.register("frame", no_nan(frame))
        connection.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
        connection.unregister("frame")
    connection.execute(f"CREATE VIEW poisoned AS SELECT {POISONED_COLUMNS.format(poison=DUCKDB_POISON)} FROM adult")
    yield connection
    connection.close()


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> tuple[str, object]:
    """(engine name, the spec dpsql.connect(backend=...) takes for it)."""
    fixture = {"duckdb": "duckdb_database", "postgres": "postgres_dsn", "spark": "spark"}[request.param]
    return request.param, request.getfixturevalue(fixture)


def open_connection(spec: object, table: str = "adult", schema: dict = ADULT_SCHEMA) -> dpsql.Connection:
    connection = dpsql.connect(backend=spec, budget=dpsql.Budget(epsilon=1000.0, delta=1e-6))
    connection.register(table, schema=schema)  # no source: the table is found in the engine's catalog
    return connection


def noise_free_rows(connection: dpsql.Connection, sql: str) -> list[tuple]:
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute(sql, epsilon=1.0)
    return cursor.fetchall()


def has_top_level_order(sql: str) -> bool:
    """Whether the statement fixes its row order (ORDER BY on the outermost query)."""
    return dpsql.sql.dialect.parse_one(sql).args.get("order") is not None


def assert_same_rows(rows: list[tuple], expected: list[tuple]) -> None:
    assert len(rows) == len(expected)
    for row, reference in zip(rows, expected):
        assert len(row) == len(reference)
        for value, wanted in zip(row, reference):
            if isinstance(wanted, float):
                assert value == pytest.approx(wanted, abs=1e-6), (row, reference)
            else:
                assert value == wanted, (row, reference)


# -- dialects ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DuckDBAnswer:
    """What dpsql on DuckDB releases for a statement (noise-free, seeded) and the SQL it sent."""

    rows: list[tuple]
    statements: list[sqlglot.exp.Expression]  # the bounded statements (none when no data is needed)


REFERENCE_SEED = 20261122  # key selection for unknown GROUP BY columns draws from it


@pytest.fixture(scope="session")
def duckdb_answer(duckdb_database: duckdb.DuckDBPyConnection) -> Callable[[Path], DuckDBAnswer]:
    """DuckDB's answer to an accepted statement, computed once per test process."""
    answers: dict[Path, DuckDBAnswer] = {}

    def answer(path: Path) -> DuckDBAnswer:
        if path not in answers:
            recorder = RecordingBackend(duckdb_database)
            connection = open_connection(recorder, schema=UNBOUNDED_ADULT_SCHEMA)
            with dpsql.testing.seeded(REFERENCE_SEED):
                rows = noise_free_rows(connection, path.read_text())
            connection.close()
            answers[path] = DuckDBAnswer(rows, [sqlglot.parse_one(s, read="duckdb") for s in recorder.statements])
        return answers[path]

    return answer


@pytest.mark.parametrize("path", ACCEPTED, ids=statement_id)
def test_every_generated_statement_round_trips_through_each_dialect(path: Path, duckdb_answer: Callable[[Path], DuckDBAnswer]) -> None:
    for statement in duckdb_answer(path).statements:  # the kept bounded rows' query (with the window), the aggregations
        window = statement.find(sqlglot.exp.Window)
        for dialect in ("duckdb", POSTGRES, SPARK):
            sql = statement.sql(dialect=dialect)
            stock = STOCK_DIALECTS[dialect]
            reparsed = sqlglot.parse_one(sql, read=stock)
            assert reparsed.sql(dialect=stock) == sql
            assert len(list(reparsed.find_all(sqlglot.exp.Window))) == len(list(statement.find_all(sqlglot.exp.Window)))
            if window is None:
                continue
            salted_hash = next(  # the salted order key: HASH(…, <salt>), in the window or the rows it ranks
                h for h in statement.find_all(sqlglot.exp.Anonymous) if h.name.upper() == "HASH" and isinstance(h.expressions[-1], sqlglot.exp.Literal)
            )
            arguments = ", ".join(a.sql(dialect=dialect) for a in salted_hash.expressions)
            own_function = {"duckdb": f"HASH({arguments})", POSTGRES: f"HASHTEXTEXTENDED(CONCAT_WS(',', {arguments}), 0)", SPARK: f"XXHASH64({arguments})"}
            assert own_function[dialect] in sql  # the same salted hash, in the engine's own function
        if statement.find(sqlglot.exp.Grouping) is not None:
            spark_sql = statement.sql(dialect=SPARK)
            groupings = sqlglot.parse_one(spark_sql, read="spark").find_all(sqlglot.exp.Grouping)
            assert all(len(g.expressions) == 1 for g in groupings)


def test_spark_grouping_bit_mask_matches_duckdb() -> None:
    columns = [sqlglot.exp.column(name) for name in ("a", "b", "c")]
    assert sqlglot.exp.Grouping(expressions=columns).sql(dialect=SPARK) == "(GROUPING(a) * 4 + GROUPING(b) * 2 + GROUPING(c) * 1)"
    assert sqlglot.exp.Grouping(expressions=columns[:1]).sql(dialect=SPARK) == "GROUPING(a)"
    assert sqlglot.exp.func("FLOOR", columns[0]).sql(dialect=POSTGRES) == "FLOOR(a)"  # other functions untouched


# -- the same answers on every engine ------------------------------------------------------------------
@pytest.mark.parametrize("path", ACCEPTED, ids=statement_id)
@pytest.mark.parametrize("name", ["postgres", "spark"])
def test_accepted_statements_give_duckdb_answers(
    name: str, path: Path, request: pytest.FixtureRequest, duckdb_answer: Callable[[Path], DuckDBAnswer]
) -> None:
    """Noise-free, with the same seed as DuckDB's answer."""
    spec = request.getfixturevalue({"postgres": "postgres_dsn", "spark": "spark"}[name])
    connection = open_connection(spec, schema=UNBOUNDED_ADULT_SCHEMA)
    try:
        with dpsql.testing.seeded(REFERENCE_SEED):
            rows = noise_free_rows(connection, path.read_text())
        expected = duckdb_answer(path).rows
        if not has_top_level_order(path.read_text()):  # SQL leaves the row order undefined
            rows, expected = sorted(rows, key=repr), sorted(expected, key=repr)
        assert_same_rows(rows, expected)
    finally:
        connection.close()


def exact_marginal(frame: pd.DataFrame, schema: Schema, columns: tuple[str, ...]) -> np.ndarray:
    """Counts by numpy, straight from the frame (every value of the fixture is inside its domain)."""
    if not columns:
        return np.array(len(frame))
    cells = []
    for name in columns:
        domain = schema.column(name)
        values = frame[name]
        if domain.kind == "categories":
            index = values.map({v: i for i, v in enumerate(domain.values)}).astype("float")
            cells.append(np.where(values.isna(), domain.null_cell if domain.nullable else np.nan, index))
        elif domain.kind == "range":
            cells.append(values.to_numpy() - int(domain.values[0]))
        else:
            cells.append(np.searchsorted(np.asarray(domain.values), values.to_numpy(), side="right") - 1)
    table = np.zeros(tuple(schema.column(c).size for c in columns), dtype=np.int64)
    np.add.at(table, tuple(np.asarray(c, dtype=np.int64) for c in cells), 1)
    return table


def test_exact_marginals_identical_on_every_engine(engine: tuple[str, object], adult_frame: pd.DataFrame) -> None:
    """Four marginals (grouping sets with the total) on the adult table, bound 3 ≥ every person's rows."""
    _, spec = engine
    schema = Schema.load(ADULT_SCHEMA)
    backend = open_backend(spec)
    marginals = (("sex", "race"), ("age",), ("job", "income"), ())
    columns = {name: schema.column(name) for name in ("sex", "race", "age", "income", "job")}
    types = {name: ColumnType.of(type_name, backend.dialect) for name, type_name in backend.describe("adult").items()}
    aggregation = BoundedAggregation(
        table="adult",
        columns=columns,
        column_types={name: types[name] for name in columns},
        marginals=marginals,
        privacy_unit="person_id",
        max_rows_per_unit=3,
        salt=123_456_789,
        row_columns=tuple(types),
    )
    arrays = aggregation.marginal_arrays(backend.run(aggregation.statement().sql(dialect=backend.dialect)))
    for marginal in marginals:
        np.testing.assert_array_equal(arrays[marginal], exact_marginal(adult_frame, schema, marginal), err_msg=str(marginal))
    backend.close()


def bounded_slot_counts(backend: object, salt: int) -> np.ndarray:
    types = {name: ColumnType.of(t, backend.dialect) for name, t in backend.describe("visits").items()}  # type: ignore[attr-defined]
    aggregation = BoundedAggregation(
        table="visits",
        columns={"slot": Schema.load(VISITS_SCHEMA).column("slot")},
        column_types={"slot": types["slot"]},
        marginals=(("slot",),),
        privacy_unit="unit_id",
        max_rows_per_unit=1,
        salt=salt,
        row_columns=tuple(types),
    )
    return aggregation.marginal_arrays(backend.run(aggregation.statement().sql(dialect=backend.dialect)))[("slot",)]  # type: ignore[attr-defined]


def test_bounding_keeps_one_uniformly_random_row_per_unit(engine: tuple[str, object]) -> None:
    """Every unit has slots 0, 1, 2; keeping 1 row each must keep UNITS rows, each slot with
    probability 1/3 (within 5 standard deviations), and another salt must choose other rows."""
    _, spec = engine
    backend = open_backend(spec)
    counts = bounded_slot_counts(backend, salt=2**61 + 12345)
    assert counts.sum() == UNITS
    spread = 5 * np.sqrt(UNITS * (1 / 3) * (2 / 3))
    assert np.all(np.abs(counts - UNITS / 3) < spread), counts
    assert not np.array_equal(counts, bounded_slot_counts(backend, salt=987_654_321)), "the salt does not change the choice"
    backend.close()


def test_joins_are_pushed_into_every_engine(engine: tuple[str, object]) -> None:
    """A private table joined with a public one (a fan-out of 2) and with itself along the unit: the same exact answers on
    every engine, the join computed there (the public table registered by name, as the engine holds it)."""
    _, spec = engine
    connection = dpsql.connect(backend=spec, budget=dpsql.Budget(epsilon=1000.0, delta=1e-6))
    connection.register("slots", public=True)
    connection.register("visits", schema={"privacy_unit": "unit_id", "max_rows_per_unit": 3, "foreign_keys": {"slot": "slots.slot"}, "columns": {"slot": {"range": [0, 2]}}})
    public = "SELECT s.half, COUNT(*) AS n FROM visits v JOIN slots s ON v.slot = s.slot GROUP BY s.half ORDER BY s.half"
    assert noise_free_rows(connection, public) == [("high", float(UNITS)), ("low", float(2 * UNITS)), ("top", float(UNITS))]
    pairs = "SELECT b.slot, COUNT(*) AS n FROM visits a JOIN visits b ON a.unit_id = b.unit_id WHERE a.slot = 0 GROUP BY b.slot"
    assert noise_free_rows(connection, pairs) == [(slot, float(UNITS)) for slot in range(3)]
    connection.close()


# -- errors and the ledger -----------------------------------------------------------------------------
WITHHELD = r"failed while reading the private rows \(\w+\); the statement was charged\. The engine's message is withheld"


def test_failure_mid_query_is_charged_and_its_message_withheld(engine: tuple[str, object], adult_frame: pd.DataFrame) -> None:
    """`poisoned` raises on every row it reads: registering it (schema only) works; running fails in the
    engine after the private rows were requested, so it is charged (one charge rule), the engine's text
    (which could quote a row) is withheld, and the connection still answers afterwards."""
    _, spec = engine
    connection = open_connection(spec, table="poisoned")
    connection.register("adult", schema=ADULT_SCHEMA)
    with pytest.raises(dpsql.OperationalError, match=WITHHELD) as raised:
        connection.cursor().execute("SELECT sex, COUNT(*) FROM poisoned GROUP BY sex", epsilon=1.0)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert connection.budget_spent().statements == 1
    assert connection.budget_remaining() == pytest.approx(999.0)
    rows = noise_free_rows(connection, "SELECT COUNT(*) FROM adult")
    assert rows[0][0] == pytest.approx(len(adult_frame))
    assert connection.budget_remaining() == pytest.approx(998.0)
    connection.close()


def test_postgres_connection_lost_mid_query_is_charged(postgres_dsn: str) -> None:
    """The server ends dpsql's session while the bounded aggregation runs (it sleeps on one row)."""
    import psycopg

    victim = f"dpsql_victim_{os.getpid()}"
    connection = open_connection(f"{postgres_dsn}&application_name={victim}", table="stalled")
    before = connection.budget_spent()

    def terminate_when_running() -> None:
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            for _ in range(300):
                ended = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s AND state = 'active' AND query LIKE %s",
                    (victim, "%dpsql_candidates%"),  # bounding the rows (the first read: inline, in its aggregation)
                ).fetchall()
                if ended:
                    return
                time.sleep(0.1)

    killer = threading.Thread(target=terminate_when_running)
    killer.start()
    started = time.monotonic()
    with pytest.raises(dpsql.OperationalError, match=WITHHELD):
        connection.cursor().execute("SELECT sex, COUNT(*) FROM stalled GROUP BY sex", epsilon=1.0)
    killer.join()
    assert time.monotonic() - started < 30  # ended by the termination, not by the 60 s sleep
    assert connection.budget_spent().statements == before.statements + 1  # the rows were asked for: charged
    assert connection.budget_remaining() == pytest.approx(999.0)
    connection.close()


def test_missing_table_names_the_engine(engine: tuple[str, object]) -> None:
    name, spec = engine
    connection = dpsql.connect(backend=spec, budget=dpsql.Budget(epsilon=1.0))
    with pytest.raises(dpsql.ProgrammingError, match=f"no table or view 'nowhere'.*{ENGINE_NAMES[name]}"):
        connection.register("nowhere", schema=ADULT_SCHEMA)
    connection.close()


def test_column_type_mismatch_names_the_engine_and_column(engine: tuple[str, object]) -> None:
    name, spec = engine
    connection = dpsql.connect(backend=spec, budget=dpsql.Budget(epsilon=1.0))
    with pytest.raises(dpsql.ProgrammingError, match=rf"'age'.*needs numbers.*{ENGINE_NAMES[name]}"):
        connection.register("adult_text_age", schema=ADULT_SCHEMA)
    connection.close()


# -- the factory -----------------------------------------------------------------------------------------
def test_factory_defaults_to_duckdb_and_keeps_custom_backends(tmp_path: Path) -> None:
    assert isinstance(open_backend(None), DuckDBBackend)
    file_backend = open_backend(tmp_path / "data.duckdb")
    assert isinstance(file_backend, DuckDBBackend) and file_backend.dialect == "duckdb"
    file_backend.close()
    existing = duckdb.connect()
    backend = open_backend(existing)
    backend.close()
    assert existing.execute("SELECT 41 + 1").fetchone() == (42,)  # not closed: it is the caller's
    recorder = RecordingBackend(existing)
    assert open_backend(recorder) is recorder


def test_factory_refuses_unknown_specs_clearly() -> None:
    with pytest.raises(dpsql.ProgrammingError, match="cannot use a int as a backend"):
        open_backend(42)
    with pytest.raises(dpsql.ProgrammingError, match="no SQL dialect known for DB-API driver 'sqlite3'"):
        open_backend(sqlite3.connect(":memory:"))


def test_unreachable_postgres_is_an_operational_error_without_the_password() -> None:
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[backends]'")
    with pytest.raises(dpsql.OperationalError, match=r"cannot connect to PostgreSQL at postgresql://u:\*\*\*@127\.0\.0\.1:1/") as raised:
        dpsql.connect(backend="postgresql://u:secret@127.0.0.1:1/db?connect_timeout=2", budget=dpsql.Budget(epsilon=1.0))
    assert "secret" not in str(raised.value)


def test_existing_psycopg_connection_is_used_and_left_open(postgres_dsn: str, adult_connection: dpsql.Connection) -> None:
    import psycopg

    existing = psycopg.connect(postgres_dsn)  # not autocommit: a failed statement must be rolled back
    backend = open_backend(existing)
    assert isinstance(backend, DBAPIBackend) and backend.dialect == POSTGRES
    connection = open_connection(existing)
    connection.register("poisoned", schema=ADULT_SCHEMA)
    with pytest.raises(dpsql.OperationalError, match=WITHHELD):
        connection.cursor().execute("SELECT sex, COUNT(*) FROM poisoned GROUP BY sex", epsilon=1.0)
    sql = "SELECT sex, job, COUNT(*) FROM adult GROUP BY sex, job"
    assert_same_rows(noise_free_rows(connection, sql), noise_free_rows(adult_connection, sql))
    connection.close()
    assert existing.execute("SELECT 1").fetchone() == (1,)
    existing.close()


def test_postgres_refuses_to_upload_data(postgres_dsn: str, adult_frame: pd.DataFrame) -> None:
    connection = dpsql.connect(backend=postgres_dsn, budget=dpsql.Budget(epsilon=1.0))
    with pytest.raises(dpsql.ProgrammingError, match="load the data into the database"):
        connection.register("frame", adult_frame, schema=ADULT_SCHEMA)
    connection.register("people", "adult", schema=ADULT_SCHEMA)  # an existing table under another name
    connection.close()


def test_spark_registers_spark_and_pandas_frames(spark: object, adult_frame: pd.DataFrame, adult_connection: dpsql.Connection) -> None:
    connection = dpsql.connect(backend=spark, budget=dpsql.Budget(epsilon=100.0))
    connection.register("from_pandas", no_nan(adult_frame), schema=ADULT_SCHEMA)
    connection.register("from_spark", spark.table("adult"), schema=ADULT_SCHEMA)  # type: ignore[attr-defined]
    with pytest.raises(dpsql.ProgrammingError, match="pass a Spark DataFrame"):
        connection.register("from_file", "adult.csv", schema=ADULT_SCHEMA)
    expected = noise_free_rows(adult_connection, "SELECT race, COUNT(*) FROM adult GROUP BY race")
    for table in ("from_pandas", "from_spark"):
        assert_same_rows(noise_free_rows(connection, f"SELECT race, COUNT(*) FROM {table} GROUP BY race"), expected)
    connection.close()


# -- released keys of every type --------------------------------------------------------
ODD_TEXT = ["it's", "back\\slash", 'say "hi"', "plain", "", "  spaced  "]
ODD_FLOATS = [1.5, -0.0, float("inf"), float("-inf"), 1e300, float("nan")]
ODD_DATES = [datetime.date(2024, 1, 1), datetime.date(1970, 1, 1), datetime.date(2099, 12, 31)]


def odd_keys_frame() -> pd.DataFrame:
    """30 units per key of every key column (one row each), so that every key is released."""
    units = 30 * 6
    return pd.DataFrame(
        {
            "pid": np.arange(units),
            "sex": np.where(np.arange(units) % 2 == 0, "F", "M"),
            "t": [ODD_TEXT[i % 6] for i in range(units)],
            "f": [ODD_FLOATS[i % 6] for i in range(units)],
            "d": [ODD_DATES[i % 3] for i in range(units)],
            "b": [i % 3 == 0 for i in range(units)],
        }
    )


def _odd_keys_table(name: str, spec: object) -> None:
    """The table ``odd_keys`` in the engine behind ``spec`` (real types: text, double, date, boolean)."""
    frame = odd_keys_frame()
    if name == "duckdb":
        spec.register("odd_frame", frame)  # type: ignore[attr-defined]
        spec.execute("CREATE OR REPLACE TABLE odd_keys AS SELECT * FROM odd_frame")  # type: ignore[attr-defined]
        spec.unregister("odd_frame")  # type: ignore[attr-defined]
    elif name == "spark":
        spec.createDataFrame(frame).createOrReplaceTempView("odd_keys")  # type: ignore[attr-defined]
    else:
        import psycopg

        with psycopg.connect(str(spec), autocommit=True) as admin:
            admin.execute("DROP TABLE IF EXISTS odd_keys")
            admin.execute("CREATE TABLE odd_keys (pid bigint, sex text, t text, f double precision, d date, b boolean)")
            with admin.cursor().copy("COPY odd_keys FROM STDIN") as copy:
                for row in frame.itertuples(index=False):
                    copy.write_row(tuple(row))


@pytest.mark.parametrize("column", ["t", "f", "d", "b"])
def test_released_keys_of_every_type_are_counted_exactly_and_reused(engine: tuple[str, object], column: str) -> None:
    """Strings with quotes and backslashes, floats with ±inf and NaN (a key of its own where the engine
    stores a NaN: pandas' NaN arrives as NULL in DuckDB and Spark, as NaN through PostgreSQL's COPY), dates
    and booleans: keys are selected, counted, cached and used by a later CUBE — never written into SQL, so
    no key can break a statement."""
    name, spec = engine
    _odd_keys_table(name, spec)
    connection = dpsql.connect(backend=spec, budget=dpsql.Budget(epsilon=100.0, delta=0.5), selection_delta=0.4)
    schema = {"privacy_unit": "pid", "columns": {"sex": {"categories": ["F", "M"]}, column: "unknown"}}
    with dpsql.testing.seeded(1):
        connection.register("odd_keys", schema=schema)
    frame = odd_keys_frame()
    stored_nan = name == "postgres"
    values = frame[column].map(lambda v: "NaN" if isinstance(v, float) and np.isnan(v) and stored_nan else v)
    # a DOUBLE key −0.0 shows as 0.0, its equal in SQL (engines print either)
    expected = {
        repr(None if isinstance(k, float) and np.isnan(k) else float(k) if k == "NaN" else k + 0.0 if isinstance(k, float) else k): n
        for k, n in values.value_counts(dropna=False).items()
    }
    with dpsql.testing.noise_disabled():
        first = connection.cursor().execute(f"SELECT {column}, COUNT(*) FROM odd_keys GROUP BY {column}", epsilon=5.0).fetchall()
        cube = connection.cursor().execute(
            f"SELECT {column}, sex, GROUPING({column}, sex) AS g, COUNT(*) FROM odd_keys GROUP BY CUBE ({column}, sex)", epsilon=5.0
        ).fetchall()
    released = {repr(key): count for key, count in first}  # by repr: a NaN key equals no other value
    assert set(released) == set(expected)
    assert all(released[k] == pytest.approx(n) for k, n in expected.items())
    by_key = {repr(key): count for key, sex, g, count in cube if g == 1}  # the cached keys, sex rolled up
    assert by_key == pytest.approx(expected)
    assert [count for *_, g, count in cube if g == 3] == [pytest.approx(len(frame))]  # the whole table
    connection.close()


def prepared_names(database: duckdb.DuckDBPyConnection) -> list[str]:
    return [row[0] for row in database.execute("SELECT name FROM duckdb_prepared_statements()").fetchall()]


def test_duckdb_prepares_each_aggregation_once_and_answers_what_the_table_holds_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """The DuckDB backend runs a kept prepared statement; a caller who replaces the table between two
    statements gets the new table's exact answer (DuckDB binds the statement again), a full cache drops
    its oldest statement, and closing leaves the caller's connection without any of them."""
    monkeypatch.setattr("dpsql.backends.duckdb.PREPARED_KEPT", 2)
    database = duckdb.connect()
    database.execute("CREATE TABLE t AS SELECT range % 3 AS slot FROM range(30)")
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=100.0), reuse=False)  # every statement reads
    connection.register("t", None, schema={"columns": {"slot": {"categories": [0, 1, 2]}}})
    count = "SELECT slot, COUNT(*) AS n FROM t GROUP BY slot ORDER BY slot"
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        assert [r[1] for r in cursor.execute(count, epsilon=1.0).fetchall()] == pytest.approx([10, 10, 10])
        kept = set(prepared_names(database))
        database.execute("CREATE OR REPLACE TABLE t AS SELECT CAST(range % 2 AS BIGINT) AS slot FROM range(7)")
        exact = [r[1] for r in database.execute(count).fetchall()]
        assert [r[1] for r in cursor.execute(count, epsilon=1.0).fetchall()] == pytest.approx([*exact, 0])  # [4, 3, 0]
        assert set(prepared_names(database)) == kept  # the same text: the same prepared statement
        for where in ("slot = 0", "slot = 1"):
            cursor.execute(f"SELECT COUNT(*) FROM t WHERE {where}", epsilon=1.0).fetchall()
    assert len(prepared_names(database)) == 2 and not kept & set(prepared_names(database))  # the oldest went
    database.execute("PREPARE mine AS SELECT 1")
    connection.close()
    assert prepared_names(database) == ["mine"]


# -- schema values written with numpy ------------------------------------------------------------------------

NUMPY_ADULT_SCHEMA = {
    "privacy_unit": np.str_("person_id"),
    "max_rows_per_unit": np.int64(3),
    "columns": {
        "sex": {"categories": np.array(["F", "M"])},
        "race": {"categories": list(np.arange(5, dtype=np.int32))},
        "age": {"range": [np.int64(17), np.int64(90)], "bounds": [np.float32(17), np.float64(90)]},
        "income": {"bins": list(np.array([0, 10000, 50000, 100000, 1000000], dtype=np.float64))},
    },
}


def test_every_engine_answers_a_numpy_schema_like_the_python_one(engine: tuple[str, object]) -> None:
    """A schema built with numpy values answers like the same schema in plain Python (np.float64 bins
    were rendered into the SQL as ``np.float64(0.0)``, and np.int64 categories refused)."""
    python_schema = {
        "privacy_unit": "person_id",
        "max_rows_per_unit": 3,
        "columns": {column: {key: _plain(value) for key, value in spec.items()} for column, spec in NUMPY_ADULT_SCHEMA["columns"].items()},  # type: ignore[attr-defined]
    }
    sql = "SELECT income, race, COUNT(*), SUM(age) FROM adult WHERE sex = 'F' GROUP BY income, race"
    answers = []
    for schema in (NUMPY_ADULT_SCHEMA, python_schema):
        connection = open_connection(engine[1], "adult", schema)
        with dpsql.testing.noise_disabled():
            answers.append([tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in connection.cursor().execute(sql, epsilon=1.0).fetchall()])
        connection.close()
    assert answers[0] == answers[1] and len(answers[0]) == 20


def _plain(value: object) -> object:
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def test_bounds_auto_reads_the_same_magnitude_codes_on_every_engine(engine: tuple[str, object], adult_frame: pd.DataFrame) -> None:
    """``bounds: auto`` computes each value's magnitude code in the engine's SQL (LN, POWER, FLOOR): every engine
    gives the clips and answers of dpsql over the same frame in its own DuckDB."""
    columns = {**ADULT_SCHEMA["columns"], "income": {"bounds": "auto"}}  # type: ignore[dict-item]
    schema = {**ADULT_SCHEMA, "columns": columns}
    sql = "SELECT sex, SUM(income), AVG(income), STDDEV(income) FROM adult GROUP BY sex"
    answers, clips = [], []
    for connection in (open_connection(engine[1], "adult", schema), dpsql.connect(budget=dpsql.Budget(epsilon=10.0))):
        if not connection.tables():
            connection.register("adult", adult_frame, schema=schema)
        cursor = connection.cursor()
        with dpsql.testing.noise_disabled():
            answers.append(cursor.execute(sql, epsilon=1.0).fetchall())
        clips.append([line for line in cursor.explanation.splitlines() if "released" in line and line.startswith("clip")])
        connection.close()
    assert clips[0] == clips[1] and len(clips[0]) == 2
    for row, reference in zip(*answers):
        assert row[0] == reference[0] and row[1:] == pytest.approx(reference[1:], rel=1e-9)
