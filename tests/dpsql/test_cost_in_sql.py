"""The cost of a statement written in SQL — ``/* dpsql: epsilon=… */``, ``SET dpsql.epsilon`` — at every
entry point: a cursor, SQLAlchemy and pandas, jupysql's ``%sql`` (``dpsql serve`` reads the same parser,
``tests/dpsql/test_serve*.py``). Each statement is charged exactly what its text says."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa
import yaml
from conftest import ADULT_SCHEMA
from sqlalchemy.dialects import registry

import dpsql
from dpsql.sql.settings import cost_comment, setting_command

BY_SEX = "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex"
BY_RACE = "SELECT race, COUNT(*) AS n FROM adult GROUP BY race"


def _charges(connection: dpsql.Connection) -> list[float]:
    return [charge.epsilon for charge in connection.budget_history()]


def test_comment_set_reset_show_in_process(adult_frame: pd.DataFrame) -> None:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0), default_epsilon=0.125, reuse=False)
    connection.register("adult", adult_frame, schema=ADULT_SCHEMA)
    cursor = connection.cursor()
    cursor.execute(BY_SEX)  # the connection's default
    cursor.execute("/* dpsql: epsilon=0.25 */ " + BY_SEX)  # the comment, anywhere in the text
    cursor.execute(BY_SEX + " /* dpsql: epsilon = 0.5 */")
    assert cursor.execute("SHOW dpsql.epsilon").fetchall() == [("0.125",)]
    assert cursor.execute("SET dpsql.epsilon = 0.75").description is None
    assert cursor.execute("SHOW dpsql.epsilon").fetchall() == [("0.75",)]
    cursor.execute(BY_SEX)  # the session's setting
    cursor.execute("/* dpsql: epsilon=0.0625 */ " + BY_SEX)  # a statement's own cost comes first
    cursor.execute("SET dpsql.epsilon TO DEFAULT")
    cursor.execute(BY_SEX)
    cursor.execute("SET SESSION dpsql.epsilon = '1.5'")
    cursor.execute(BY_SEX)
    cursor.execute("RESET dpsql.epsilon")
    cursor.execute(BY_SEX)
    assert _charges(connection) == pytest.approx([0.125, 0.25, 0.5, 0.75, 0.0625, 0.125, 1.5, 0.125])
    budget = cursor.execute("SHOW dpsql.budget").fetchall()
    assert budget == [(pytest.approx(10.0 - sum(_charges(connection))), 0.0, pytest.approx(0.0))]
    connection.close()


def test_conflicting_and_bad_costs_are_refused_before_reading(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    cursor.execute("/* dpsql: epsilon=0.5 */ " + BY_SEX, epsilon=0.5)  # the same cost twice: fine
    with pytest.raises(dpsql.ProgrammingError, match="given twice, differently"):
        cursor.execute("/* dpsql: epsilon=0.5 */ " + BY_RACE, epsilon=0.25)
    with pytest.raises(dpsql.ProgrammingError, match="cannot read the dpsql comment"):
        cursor.execute("/* dpsql: budget=all */ " + BY_RACE)
    with pytest.raises(dpsql.ProgrammingError, match="positive number"):
        cursor.execute("SET dpsql.epsilon = -1")
    with pytest.raises(dpsql.ProgrammingError, match="unrecognized setting dpsql.colour"):
        cursor.execute("SET dpsql.colour = 'red'")
    with pytest.raises(dpsql.ProgrammingError, match="Gaussian noise"):
        cursor.execute("SET dpsql.rho = 0.1")
    with pytest.raises(dpsql.ProgrammingError, match="no privacy cost"):
        cursor.execute(BY_RACE)
    assert adult_connection.budget_spent().statements == 1


def test_non_negative_in_the_comment(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    cursor.execute("/* dpsql: epsilon=0.001, non_negative=on */ SELECT age, COUNT(*) FROM adult WHERE age < 20 GROUP BY age")
    assert all(row[1] >= 0 for row in cursor.fetchall())
    assert "non-negative" in cursor.explanation or "NNLS" in cursor.explanation or "non_negative" in cursor.explanation


def test_a_batch_costs_the_sum_of_its_statements_costs(adult_frame: pd.DataFrame) -> None:
    adult_connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0), reuse=False)
    adult_connection.register("adult", adult_frame, schema=ADULT_SCHEMA)
    adult_connection.workload(["/* dpsql: epsilon=0.25 */ " + BY_SEX, "/* dpsql: epsilon=0.5 */ " + BY_RACE])
    assert _charges(adult_connection) == pytest.approx([0.75])
    with pytest.raises(dpsql.ProgrammingError, match="give every statement its cost"):
        adult_connection.workload(["/* dpsql: epsilon=0.25 */ " + BY_SEX, BY_RACE])
    adult_connection.cursor().executemany("/* dpsql: epsilon=0.125 */ SELECT sex, COUNT(*) FROM adult WHERE race = ? GROUP BY sex", [(0,), (1,)])
    assert _charges(adult_connection) == pytest.approx([0.75, 0.25])


def test_the_parser_reads_what_serve_and_the_cursor_read() -> None:
    assert cost_comment("SELECT 1 /* dpsql: rho=0.5 , non_negative=off */") == {"rho": "0.5", "non_negative": "off"}
    assert setting_command("  set local dpsql.Epsilon = 0.3 ;") is not None
    assert setting_command("SELECT 1") is None and setting_command(None) is None


@pytest.fixture()
def files(tmp_path: Path, adult_frame: pd.DataFrame) -> Path:
    adult_frame.to_csv(tmp_path / "adult.csv", index=False)
    (tmp_path / "adult.yaml").write_text(yaml.safe_dump(ADULT_SCHEMA))
    if not any(e.name == "dpsql" for e in __import__("importlib").metadata.entry_points(group="sqlalchemy.dialects")):
        registry.register("dpsql", "dpsql.sqlalchemy", "DpsqlDialect")
    return tmp_path


def _url(files: Path, ledger: str) -> str:
    return f"dpsql:///?data={files / 'adult.csv'}&schema={files / 'adult.yaml'}&ledger={files / ledger}&epsilon=5&default_epsilon=0.125&reuse=false"


def test_sqlalchemy_and_pandas_read_the_cost_from_the_text(files: Path) -> None:
    engine = sa.create_engine(_url(files, "sa.ledger"))
    pd.read_sql("/* dpsql: epsilon=0.25 */ " + BY_SEX, engine)
    with engine.connect() as connection:
        connection.execute(sa.text("SET dpsql.epsilon = 0.5"))
        connection.execute(sa.text(BY_SEX)).fetchall()
        connection.execute(sa.text("RESET dpsql.epsilon"))
        connection.execute(sa.text(BY_SEX)).fetchall()
    engine.dispose()
    with dpsql.connect(ledger=files / "sa.ledger") as connection:
        assert _charges(connection) == pytest.approx([0.25, 0.5, 0.125])


def test_jupysql_reads_the_cost_from_the_text(files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLOOMBER_STATS_ENABLED", "false")
    monkeypatch.setenv("PLOOMBER_VERSION_CHECK_DISABLED", "true")
    monkeypatch.setitem(sys.modules, "pyspark.sql.connect.dataframe", None)
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "sql")
    shell.run_line_magic("config", "SqlMagic.displaylimit = 0")
    shell.run_line_magic("sql", _url(files, "magic.ledger") + " --alias costs")
    shell.run_line_magic("sql", "/*+ dpsql: epsilon=0.25 */ " + BY_SEX)  # jupysql strips /* comments */ but keeps hints
    shell.run_line_magic("sql", "SET dpsql.epsilon = 0.5")
    shell.run_line_magic("sql", BY_SEX)
    shell.run_cell_magic("sql", "", "SELECT /*+ dpsql: epsilon=0.0625 */ race, COUNT(*) AS n\nFROM adult GROUP BY race")
    shell.run_line_magic("sql", "--close costs")
    with dpsql.connect(ledger=files / "magic.ledger") as connection:
        assert _charges(connection) == pytest.approx([0.25, 0.5, 0.0625])
