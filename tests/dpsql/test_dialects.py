"""Names and dialects: statements written for DuckDB, PostgreSQL, SmartNoise SQL (VAR, STD, TOP) and Google's
differential-privacy SQL (WITH DIFFERENTIAL_PRIVACY OPTIONS, contribution_bounds_per_group) run as written —
noise disabled, each equals DuckDB's answer to its plain form (the ``-- duckdb:`` line of its corpus file) —
and the ones that cannot mean what they say are refused before anything is read."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import ADULT_SCHEMA
from duckdb_answers import assert_cells_match, assert_refused_as_expected, assert_same_rows, duckdb_rows

import dpsql
import dpsql.testing
from dpsql.sql import dialect

GRAMMAR = Path(__file__).resolve().parents[2] / "grammar"
ACCEPTED = sorted((GRAMMAR / "accepted" / "dialects").glob("*.sql"))
REJECTED = sorted((GRAMMAR / "rejected" / "dialects").glob("*.sql"))
REFERENCE = re.compile(r"^-- duckdb: (.+)$")


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: p.stem)
def test_dialect_statement_equals_duckdb(path: Path, adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    header, sql = path.read_text().split("\n", 1)
    reference = REFERENCE.match(header)
    assert reference, f"{path.name} must start with '-- duckdb: <the statement DuckDB runs>'"
    with dpsql.testing.noise_disabled():
        cursor = adult_connection.cursor().execute(sql, epsilon=1.0)
    names, exact = duckdb_rows(reference.group(1), {"adult": adult_frame, "ADULT": adult_frame})
    assert [d[0] for d in cursor.description] == names
    if "LIMIT" in reference.group(1):
        assert_same_rows(cursor.fetchall(), exact, ordered=True)
    else:
        assert_cells_match(cursor.fetchall(), cursor.errors, exact)


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: p.stem)
def test_explain_shows_a_dialect_statement_as_written(path: Path, adult_connection: dpsql.Connection) -> None:
    """EXPLAIN of every dialect spelling: rows, nothing charged, and the statement shown keeps Google's options and
    contribution bounds (the shown text parses back to the same statement)."""
    from dpsql.sql.dialect import Dpsql, parse_one

    sql = path.read_text().split("\n", 1)[1]
    rows = adult_connection.cursor().execute("EXPLAIN " + sql).fetchall()
    shown = rows[0][3]
    assert rows[0][0] == "statement" and adult_connection.budget_spent().statements == 0
    assert parse_one(shown).sql(dialect=Dpsql) == parse_one(sql).sql(dialect=Dpsql)
    for spelling in ("DIFFERENTIAL_PRIVACY", "contribution_bounds_per_group", "contribution_bounds_per_row"):
        assert (spelling in shown) == (spelling in sql)


@pytest.mark.parametrize("path", REJECTED, ids=lambda p: p.stem)
def test_dialect_refusal_says_why_and_charges_nothing(path: Path, adult_connection: dpsql.Connection) -> None:
    assert_refused_as_expected(path, adult_connection)


def test_register_accepts_a_qualified_name(adult_frame: pd.DataFrame) -> None:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0))
    connection.register("PUMS.PUMS", adult_frame, schema=ADULT_SCHEMA)
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        for name in ("PUMS.PUMS", "pums.pums", "PUMS", "dpsql.PUMS.PUMS"):
            rows = cursor.execute(f"SELECT sex, COUNT(*) FROM {name} GROUP BY sex", epsilon=0.1).fetchall()
            assert rows == [("F", pytest.approx(float((adult_frame.sex == "F").sum()))), ("M", pytest.approx(float((adult_frame.sex == "M").sum())))]
    assert connection.budget_spent().statements == 1  # the same statement: answered from the kept measurement after the first
    with pytest.raises(dpsql.ProgrammingError, match="unknown table 'public.PUMS'"):
        cursor.execute("SELECT COUNT(*) FROM public.PUMS", epsilon=0.1)  # the table lives in schema PUMS, not public
    connection.register("other.PUMS", adult_frame, schema=ADULT_SCHEMA)
    with pytest.raises(dpsql.ProgrammingError, match="could be any of"):
        cursor.execute("SELECT COUNT(*) FROM PUMS", epsilon=0.1)
    with pytest.raises(dpsql.ProgrammingError, match="must be an identifier"):
        connection.register("a.b.c.d", adult_frame, schema=ADULT_SCHEMA)
    connection.close()


def test_google_options_give_the_cost_and_the_selection_delta(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    cursor.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 0.25, delta = 1e-7, privacy_unit_column = person_id) "
                   "sex, COUNT(*) FROM adult GROUP BY sex")
    assert adult_connection.budget_spent().epsilon == pytest.approx(0.25)
    cursor.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 0.5, delta = 1e-7) browser, COUNT(*) FROM adult GROUP BY browser")
    spent = adult_connection.budget_spent()
    assert spent.epsilon == pytest.approx(0.75) and 0 < spent.delta <= 1e-7  # the selection spends at most the statement's delta
    with pytest.raises(dpsql.ProgrammingError, match="delta must lie in"):
        cursor.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 0.5, delta = 2) sex, COUNT(*) FROM adult GROUP BY sex")


def test_contribution_bounds_clamp_like_declared_bounds(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    """``SUM(age, contribution_bounds_per_group => (20, 60))`` clamps each value to [20, 60], as declared bounds would."""
    with dpsql.testing.noise_disabled():
        rows = adult_connection.cursor().execute(
            "SELECT sex, SUM(age, contribution_bounds_per_group => (20, 60)) AS s FROM adult GROUP BY sex", epsilon=1.0
        ).fetchall()
    _, exact = duckdb_rows("SELECT sex, SUM(LEAST(GREATEST(age, 20), 60)) AS s FROM adult GROUP BY sex", {"adult": adult_frame})
    assert_same_rows(rows, exact)


def test_top_is_a_limit_and_a_column_named_top_is_a_column() -> None:
    from dpsql.sql.dialect import parse_one

    assert parse_one("SELECT TOP 5 a FROM t").sql(dialect="duckdb") == "SELECT a FROM t LIMIT 5"
    assert parse_one("SELECT top, COUNT(*) FROM t GROUP BY top").sql(dialect="duckdb") == "SELECT top, COUNT(*) FROM t GROUP BY top"
    assert parse_one("SELECT VAR(x), STD(x) FROM t").sql(dialect="duckdb") == "SELECT VARIANCE(x), STDDEV(x) FROM t"


@pytest.mark.parametrize(("written", "read"), [
    ("SELECT COUNT(*) FILTER (WHERE a > 1) FROM t", 'SELECT SUM(CASE WHEN a > 1 THEN 1 ELSE 0 END) AS "COUNT(*) FILTER(WHERE a > 1)" FROM t'),
    ("SELECT COUNT(x) FILTER (WHERE a > 1) AS n FROM t", "SELECT SUM(CASE WHEN (a > 1) AND NOT x IS NULL THEN 1 ELSE 0 END) AS n FROM t"),
    ("SELECT AVG(x) FILTER (WHERE a = 'b' OR c) AS m FROM t", "SELECT AVG(CASE WHEN a = 'b' OR c THEN x END) AS m FROM t"),
    ("SELECT SUM(x) FILTER (WHERE a) * 2 FROM t", "SELECT SUM(CASE WHEN a THEN x END) * 2 FROM t"),
    ("SELECT COUNT(DISTINCT x) FILTER (WHERE a) FROM t", "SELECT COUNT(DISTINCT x) FILTER(WHERE a) FROM t"),  # left as written: refused later
])
def test_aggregate_filter_clauses_read_as_the_case_they_stand_for(written: str, read: str) -> None:
    assert dialect.parse_one(written).sql(dialect="duckdb") == read


def test_a_filter_on_an_aggregate_that_has_no_case_form_is_refused_in_one_line() -> None:
    connection = dpsql.connect(budget=dpsql.Budget(1.0))
    connection.register("t", pd.DataFrame({"x": [1, 2], "a": [0, 1]}), schema={"columns": {"x": {"range": [0, 9]}, "a": {"range": [0, 1]}}})
    with pytest.raises(dpsql.NotSupportedError, match=r"FILTER \(WHERE …\) is supported on COUNT\(\*\), COUNT\(x\), SUM, AVG") as raised:
        connection.cursor().execute("SELECT MEDIAN(x) FILTER (WHERE a = 1) FROM t", epsilon=0.1)
    assert "\n" not in str(raised.value) and connection.budget_spent().statements == 0
