"""The SQLAlchemy dialect, driven through SQLAlchemy Core, pandas.read_sql and jupysql's %sql."""

from __future__ import annotations

import os
import sys
import tomllib
import warnings
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import sqlalchemy as sa
import yaml
from conftest import ADULT_SCHEMA
from sqlalchemy.dialects import registry

import dpsql
import dpsql.testing
from dpsql.sqlalchemy import DpsqlDialect, connect_arguments

ROOT = Path(__file__).resolve().parents[2]
BY_SEX = "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex"


@pytest.fixture(scope="module", autouse=True)
def dialect_registered() -> None:
    """An installed dpsql has the entry point (CI installs afresh); a source tree run against an older
    install registers the same target by hand. test_the_entry_point_is_declared checks the declaration."""
    if not any(e.name == "dpsql" for e in metadata.entry_points(group="sqlalchemy.dialects")):
        registry.register("dpsql", "dpsql.sqlalchemy", "DpsqlDialect")


@pytest.fixture()
def files(tmp_path: Path, adult_frame: pd.DataFrame) -> Path:
    adult_frame.to_csv(tmp_path / "adult.csv", index=False)
    (tmp_path / "adult.yaml").write_text(yaml.safe_dump(ADULT_SCHEMA))
    return tmp_path


def url(files: Path, **query: object) -> str:
    parts = {"data": files / "adult.csv", "schema": files / "adult.yaml", **query}
    return "dpsql:///?" + "&".join(f"{k}={v}" for k, v in parts.items())


@pytest.fixture()
def engine(files: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(url(files, ledger=files / "budget.ledger", epsilon=2, delta="1e-6", default_epsilon=0.1))
    yield engine
    engine.dispose()


def spent(engine: sa.Engine) -> dpsql.Spent:
    return engine.raw_connection().dbapi_connection.budget_spent()


def exact(frame: pd.DataFrame, sql: str) -> list[tuple[object, ...]]:
    database = duckdb.connect()
    database.register("adult", frame)
    return database.execute(sql).fetchall()


def rounded(rows: object) -> list[tuple[object, ...]]:
    """Released floats rounded (least squares leaves ~1e-13 residue on exact counts)."""
    return [tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows]  # type: ignore[union-attr]


def test_the_entry_point_is_declared() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["sqlalchemy.dialects"]
    assert metadata.EntryPoint("dpsql", declared["dpsql"], "sqlalchemy.dialects").load() is DpsqlDialect
    assert registry.load("dpsql") is DpsqlDialect


def test_statements_cost_the_execution_option_else_the_default(engine: sa.Engine, files: Path) -> None:
    with engine.connect() as connection:
        rows = connection.execution_options(dpsql_epsilon=0.5).execute(sa.text(BY_SEX)).fetchall()
        assert [r[0] for r in rows] == ["F", "M"]
        assert spent(engine).epsilon == pytest.approx(0.5)
        connection.execution_options(dpsql_epsilon=None)  # back to the connection's default
    with engine.connect() as connection:
        connection.execute(sa.text("SELECT COUNT(*) AS n FROM adult WHERE age > 30"))
        statement = sa.text("SELECT race, COUNT(*) AS n FROM adult WHERE age > 40 GROUP BY race").execution_options(dpsql_epsilon=0.25)
        connection.execute(statement)
    assert spent(engine).epsilon == pytest.approx(0.5 + 0.1 + 0.25)
    engine.dispose()
    reopened = sa.create_engine(url(files, ledger=files / "budget.ledger"))  # the ledger keeps budget and spending
    assert spent(reopened).epsilon == pytest.approx(0.85) and spent(reopened).statements == 3
    reopened.dispose()


def test_no_cost_anywhere_is_refused_before_reading(files: Path) -> None:
    engine = sa.create_engine(url(files, epsilon=1))
    with engine.connect() as connection, pytest.raises(sa.exc.ProgrammingError) as raised:
        connection.execute(sa.text(BY_SEX))
    assert isinstance(raised.value.orig, dpsql.ProgrammingError) and "no privacy cost" in str(raised.value.orig)
    with engine.connect() as connection, pytest.raises(sa.exc.DatabaseError) as raised:
        connection.execution_options(dpsql_epsilon=5.0).execute(sa.text(BY_SEX))
    assert isinstance(raised.value.orig, dpsql.BudgetExceededError)
    assert spent(engine).statements == 0
    engine.dispose()


def test_core_select_gives_duckdbs_answers_with_noise_off(engine: sa.Engine, adult_frame: pd.DataFrame) -> None:
    adult = sa.Table("adult", sa.MetaData(), autoload_with=engine)
    query = (
        sa.select(adult.c.race, sa.func.count().label("n"))
        .where(adult.c.age > 30, adult.c.sex == "F")
        .group_by(adult.c.race)
        .order_by(sa.desc("n"))
        .limit(3)
    )
    assert "LIMIT ?" in str(query.compile(engine))  # bound after the WHERE parameters: text order counts
    with dpsql.testing.noise_disabled(), engine.connect() as connection:
        rows = connection.execute(query).fetchall()
    truth = exact(adult_frame, "SELECT race, COUNT(*) AS n FROM adult WHERE age > 30 AND sex = 'F' GROUP BY race ORDER BY n DESC LIMIT 3")
    assert rounded(rows) == [(r, float(n)) for r, n in truth]


def test_reflection_lists_tables_and_typed_columns_from_the_schema(engine: sa.Engine) -> None:
    inspector = sa.inspect(engine)
    assert inspector.get_table_names() == ["adult"] and inspector.has_table("adult") and not inspector.has_table("other")
    columns = {c["name"]: c for c in inspector.get_columns("adult")}
    assert list(columns) == ["person_id", "sex", "race", "age", "income", "job", "browser"]
    kinds = {name: type(c["type"]) for name, c in columns.items()}
    assert kinds == {
        "person_id": sa.BigInteger, "sex": sa.String, "race": sa.Integer, "age": sa.Integer,
        "income": sa.Float, "job": sa.String, "browser": sa.String,
    }
    assert columns["age"]["comment"] == "integer range [17, 90]" and not columns["age"]["nullable"]
    assert columns["job"]["nullable"] and columns["person_id"]["comment"] == "privacy unit"
    metadata_ = sa.MetaData()
    metadata_.reflect(engine)
    assert list(metadata_.tables) == ["adult"] and spent(engine).statements == 0
    with pytest.raises(sa.exc.NoSuchTableError):
        inspector.get_columns("other")


def test_a_connection_of_ones_own_through_creator(adult_frame: pd.DataFrame) -> None:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1.0), default_epsilon=0.2)
    connection.register("adult", adult_frame, schema=ADULT_SCHEMA)
    engine = sa.create_engine("dpsql://", creator=lambda: connection, pool_pre_ping=True)
    with engine.connect() as c:
        assert len(c.execute(sa.text(BY_SEX)).fetchall()) == 2
        assert len(c.execute(sa.text(BY_SEX)).fetchall()) == 2  # the same connection: re-used, free
    assert connection.budget_spent().epsilon == pytest.approx(0.2)  # pings spent nothing
    assert sa.inspect(engine).get_table_names() == ["adult"]
    engine.dispose()
    assert connection.closed


def test_pandas_read_sql_through_the_engine_warns_nothing(engine: sa.Engine, adult_frame: pd.DataFrame) -> None:
    with warnings.catch_warnings(), dpsql.testing.noise_disabled():
        warnings.simplefilter("error")
        frame = pd.read_sql(BY_SEX, engine)
        older = pd.read_sql(sa.text("SELECT sex, COUNT(*) AS n FROM adult WHERE age > :age GROUP BY sex"), engine, params={"age": 60})
    assert rounded(frame.to_records(index=False).tolist()) == [(s, float(n)) for s, n in exact(adult_frame, BY_SEX + " ORDER BY sex")]
    assert older["n"].round(6).tolist() == [float(n) for _, n in exact(adult_frame, "SELECT sex, COUNT(*) FROM adult WHERE age > 60 GROUP BY sex ORDER BY sex")]
    assert spent(engine).epsilon == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"epsilon": "1", "colour": "red"}, r"unknown dpsql URL parameter\(s\) \['colour'\]"),
        ({"delta": "1e-6"}, "delta= without epsilon="),
        ({"epsilon": "one"}, "epsilon= must be a number"),
        ({"epsilon": "1", "reuse": "maybe"}, "reuse= must be true or false"),
        ({"epsilon": "1", "data": "adult.csv"}, "both data= .* and schema="),
        ({"epsilon": "1", "table": "adult"}, "table= without data= and schema="),
        ({"epsilon": ("1", "2")}, "epsilon= more than once"),
    ],
)
def test_bad_urls_get_a_dpsql_message(query: dict[str, object], message: str) -> None:
    with pytest.raises(dpsql.ProgrammingError, match=message):
        connect_arguments(None, query)  # type: ignore[arg-type]


def test_url_arguments_become_connect_arguments() -> None:
    arguments = connect_arguments("w.duckdb", {"epsilon": "2", "delta": "1e-6", "reuse": "false", "noise": "gaussian", "data": "dir/my-data.csv", "schema": "s.yaml"})
    assert arguments == {
        "database": "w.duckdb", "budget": dpsql.Budget(2.0, 1e-6), "reuse": False, "noise": "gaussian",
        "tables": {"my_data": ("dir/my-data.csv", "s.yaml")},
    }


def test_jupysql_magic_runs_against_the_dialect(files: Path, adult_frame: pd.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLOOMBER_STATS_ENABLED", "false")  # jupysql's telemetry: off (and no network in CI)
    monkeypatch.setenv("PLOOMBER_VERSION_CHECK_DISABLED", "true")
    # jupysql imports pyspark.sql.connect when pyspark is installed, which needs grpcio (not in our extras)
    monkeypatch.setitem(sys.modules, "pyspark.sql.connect.dataframe", None)
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "sql")
    shell.run_line_magic("config", "SqlMagic.displaylimit = 0")
    shell.run_line_magic("sql", url(files, epsilon=1, default_epsilon=0.125, ledger=files / "magic.ledger") + " --alias private")
    with dpsql.testing.noise_disabled():
        result = shell.run_line_magic("sql", BY_SEX)
    assert rounded(result.DataFrame().to_records(index=False).tolist()) == [(s, float(n)) for s, n in exact(adult_frame, BY_SEX + " ORDER BY sex")]
    shell.run_line_magic("sql", "--close private")
    shell.run_line_magic("sql", url(files, epsilon=1, default_epsilon=0.125, stderr_columns="true") + " --alias errors")
    with dpsql.testing.noise_disabled():
        shown = shell.run_line_magic("sql", BY_SEX).DataFrame()  # the table jupysql shows carries the errors
    assert list(shown.columns) == ["sex", "n", "n_stderr"] and (shown.n_stderr > 0).all()
    shell.run_line_magic("sql", "--close errors")
    with dpsql.connect(ledger=files / "magic.ledger") as connection:
        assert connection.budget_spent().epsilon == pytest.approx(0.125)
    assert os.environ["PLOOMBER_STATS_ENABLED"] == "false"
