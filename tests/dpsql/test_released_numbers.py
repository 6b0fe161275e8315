"""What a released result shows: numbers without float residue, no row for a cell the WHERE clause excludes
(a pure function of the statement and the schema), and standard errors as columns where only rows and
columns are shown (``stderr_columns``, the CLI's CSV and JSON)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml

import dpsql
import dpsql.testing
from dpsql import cli
from dpsql.result import clean_number

COUNTRIES = {"privacy_unit": None, "columns": {"country": {"categories": list(range(42))}, "age": {"range": [0, 84]}}}


@pytest.fixture(scope="module")
def countries() -> pd.DataFrame:
    rng = np.random.default_rng(4)
    return pd.DataFrame({"country": rng.choice(42, 3000, p=np.r_[0.5, np.full(41, 0.5 / 41)]), "age": rng.integers(17, 85, 3000)})


def _connection(frame: pd.DataFrame, **options: object) -> dpsql.Connection:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6), **options)  # type: ignore[arg-type]
    connection.register("t", frame, schema=COUNTRIES)
    return connection


# --------------------------------------------------------------------------------------------------
# Clean numbers.
# --------------------------------------------------------------------------------------------------


def test_clean_numbers_snap_float_residue_to_short_decimals() -> None:
    assert [clean_number(v) for v in (1484.9999999999998, 32621.999999999996, 41675.00000000001, 0.1 + 0.2)] == [1485.0, 32622.0, 41675.0, 0.3]
    assert math.copysign(1.0, clean_number(-0.0)) == 1.0  # -0.0 is 0
    assert clean_number(0.2849903673123) == 0.2849903673  # a noisy value keeps 10 significant digits
    assert clean_number(123456789012.7, 1.4) == 123456789012.7  # ... but never moves by more than error/100
    assert [clean_number(v) for v in (999999999.0, 1000000001.0, 12345678901.0)] == [999999999.0, 1e9, 12345678900.0]  # whole below 10⁹
    assert clean_number(37.123456789123, 31.6) == 37.1234568  # the fewest digits within 10⁻⁹: nine
    assert [clean_number(v) for v in ("a", 3, None, math.inf)] == ["a", 3, None, math.inf]
    assert type(clean_number(0)) is int and type(clean_number(False)) is bool  # keys 0 and FALSE stay what they are


def test_released_sums_of_a_cube_have_no_float_residue(countries: pd.DataFrame) -> None:
    """Least squares over a CUBE leaves residue on exact answers (``540864.9999999999``): released, they are
    the integers DuckDB gives, exactly."""
    connection = _connection(countries)
    sql = "SELECT country, COUNT(*), SUM(age) FROM t GROUP BY CUBE (country)"
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute(sql, epsilon=1.0).fetchall()
    exact = {c: (float(n), float(s)) for c, n, s in duckdb.sql(sql.replace("FROM t", "FROM countries")).fetchall()}
    assert {c: (n, s) for c, n, s in rows if n} == exact  # exact float equality
    connection.close()


# --------------------------------------------------------------------------------------------------
# Cells the WHERE clause excludes.
# --------------------------------------------------------------------------------------------------


def test_a_where_on_the_group_column_returns_only_the_cells_it_allows(countries: pd.DataFrame) -> None:
    """``WHERE country = 41 GROUP BY country`` is one row (was 42, 41 of them exact 0 with STDDEV NULL);
    ``WHERE age >= 30 … ORDER BY age LIMIT 10`` gives ages 30-39 (was ages 0-9: zeros that are no measurement)."""
    connection = _connection(countries)
    cursor = connection.cursor()
    rows = cursor.execute("SELECT country, COUNT(*), STDDEV(age) FROM t WHERE country = 41 GROUP BY country", epsilon=1.0).fetchall()
    assert [r[0] for r in rows] == [41] and all(e is not None and e > 0 for e in cursor.errors[0][1:])
    rows = cursor.execute("SELECT age, COUNT(*) FROM t WHERE age >= 30 GROUP BY age ORDER BY age LIMIT 10", epsilon=1.0).fetchall()
    assert [r[0] for r in rows] == list(range(30, 40))
    cube = cursor.execute("SELECT country, COUNT(*) FROM t WHERE country IN (1, 2) GROUP BY CUBE (country)", epsilon=1.0).fetchall()
    assert [r[0] for r in cube] == [1, 2, None]
    connection.close()


def test_excluded_cells_can_be_kept_as_exact_zeros(countries: pd.DataFrame) -> None:
    connection = _connection(countries, excluded_cells="zeros")
    cursor = connection.cursor().execute("SELECT country, COUNT(*), AVG(age) FROM t WHERE country = 41 GROUP BY country", epsilon=1.0)
    rows, errors = cursor.fetchall(), cursor.errors
    assert [r[0] for r in rows] == list(range(42)) and connection.excluded_cells == "zeros"
    assert all(r[1:] == (0.0, None) and e[1:] == (0.0, None) for r, e in zip(rows[:41], errors[:41]))
    assert errors[41][1] > 0
    connection.close()
    with pytest.raises(dpsql.ProgrammingError, match="excluded_cells must be one of"):
        dpsql.connect(budget=dpsql.Budget(epsilon=1.0), excluded_cells="drop")


def test_which_cells_are_rows_depends_on_the_statement_and_schema_only(countries: pd.DataFrame) -> None:
    """The same statement over the data, over an empty table and over a table whose rows all fail the WHERE
    clause shows the same cells: the rows a result has reveal nothing about the data."""
    sql = "SELECT country, age // 10 AS decade, COUNT(*) FROM t WHERE country < 3 AND age BETWEEN 25 AND 44 GROUP BY country, decade"
    shown = []
    for frame in (countries, countries.iloc[:0], countries.assign(country=41)):
        connection = _connection(frame)
        shown.append([r[:2] for r in connection.cursor().execute(sql, epsilon=1.0).fetchall()])
        connection.close()
    assert shown[0] == shown[1] == shown[2] == [(c, d) for c in range(3) for d in (2, 3, 4)]


# --------------------------------------------------------------------------------------------------
# Standard errors as columns.
# --------------------------------------------------------------------------------------------------


def test_stderr_columns_follow_each_released_column(countries: pd.DataFrame) -> None:
    connection = _connection(countries, stderr_columns=True)
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute("SELECT country, COUNT(*) AS n, AVG(age) AS mean FROM t WHERE country IN (0, 1) GROUP BY country", epsilon=1.0)
    assert [d[0] for d in cursor.description] == ["country", "n", "n_stderr", "mean", "mean_stderr"]
    rows, errors = cursor.fetchall(), cursor.errors
    assert all(row[2] == error[1] and row[4] == error[3] and row[2] > 0 for row, error in zip(rows, errors))
    assert list(cursor.df(errors=True).columns) == ["country", "n", "n_stderr", "mean", "mean_stderr"]  # not twice
    batch = connection.workload(["SELECT COUNT(*) AS n FROM t"], epsilon=1.0)
    assert [d[0] for d in batch[0].description] == ["n", "n_stderr"]
    connection.close()


def test_cli_csv_and_json_keep_columns_aligned_when_a_row_has_no_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A group whose median is NULL (no rows) has no error: its row still has every column (the CSV had short
    rows, the JSON shifted the errors onto the wrong names)."""
    (tmp_path / "t.csv").write_text("country,age\n0,30\n0,40\n1,50\n")
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"privacy_unit": None, "columns": {"country": {"categories": [0, 1, 2]}, "age": {"range": [0, 84]}}}))
    common = ["query", "--data", str(tmp_path / "t.csv"), "--schema", str(tmp_path / "t.yaml"), "--budget-epsilon", "10", "--epsilon", "1",
              "SELECT country, MEDIAN(age) AS mean, COUNT(*) AS n FROM t GROUP BY country"]
    with dpsql.testing.noise_disabled():
        assert cli.main(common + ["--format", "csv"]) == 0
        table = list(csv.reader(io.StringIO(capsys.readouterr().out)))
        assert cli.main(common + ["--format", "json"]) == 0
        records = json.loads(capsys.readouterr().out)
    assert table[0] == ["country", "mean", "mean_stderr", "n", "n_stderr"] and all(len(r) == 5 for r in table)
    assert table[3][:3] == ["2", "", ""] and float(table[3][4]) > 0  # no row in country 2: NULL, no error
    assert records[2]["mean"] is None and records[2]["mean_stderr"] is None and records[2]["n_stderr"] > 0
    assert records[0]["mean"] == 35.0 and records[0]["mean_stderr"] > 0


def test_a_sqlalchemy_url_asks_for_stderr_columns(tmp_path: Path, countries: pd.DataFrame) -> None:
    """``stderr_columns=true`` in the URL: pandas.read_sql (and jupysql, on the same engine) shows the errors."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    countries.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(COUNTRIES))
    engine = sqlalchemy.create_engine(
        f"dpsql:///?epsilon=5&default_epsilon=1&stderr_columns=true&data={tmp_path / 't.csv'}&schema={tmp_path / 't.yaml'}"
    )
    frame = pd.read_sql("SELECT country, COUNT(*) AS n FROM t WHERE country < 2 GROUP BY country", engine)
    assert list(frame.columns) == ["country", "n", "n_stderr"] and (frame.n_stderr > 0).all()
    engine.dispose()

