"""SUM and AVG grouped by (or filtered on) a column without declared domain, over the keys an earlier statement
released: the key set is then a public domain (a remainder cell holds every other key's rows), and the
aggregate is planned, read and released as over any declared domain. One row per user, so key bounding keeps
every row and, with the noise off, every released value is DuckDB's exact answer."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
from pipeline_helpers import prepare

import dpsql
import dpsql.testing

SCHEMA = {
    "privacy_unit": "user_id", "max_rows_per_unit": 1,
    "columns": {"age": {"bounds": [0, 100]}, "city": "unknown", "job": "unknown"},
}


@pytest.fixture
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    cities = np.repeat(["paris", "lyon", "nice", "lille"], [50, 30, 40, 2])
    return pd.DataFrame(
        {"user_id": np.arange(len(cities)), "city": cities, "job": rng.integers(1, 3, len(cities)), "age": rng.integers(18, 90, len(cities))}
    )


@pytest.fixture
def logs(frame: pd.DataFrame) -> dpsql.Connection:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=100.0, delta=1e-5))
    connection.register("logs", frame, schema=SCHEMA)
    return connection


def _exact(frame: pd.DataFrame, sql: str) -> dict[object, float]:
    return {row[0] if len(row) == 2 else tuple(row[:-1]): float(row[-1]) for row in duckdb.query_df(frame, "logs", sql).fetchall()}


def test_sum_and_avg_by_released_keys_equal_duckdb(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(1):
        cities = [r[0] for r in logs.cursor().execute("SELECT city, COUNT(*) FROM logs GROUP BY city", epsilon=1.0).fetchall()]
        sums = dict(logs.cursor().execute("SELECT city, SUM(age) FROM logs GROUP BY city", epsilon=1.0).fetchall())
        means = dict(logs.cursor().execute("SELECT city, AVG(age) FROM logs GROUP BY city", epsilon=1.0).fetchall())
    assert sorted(cities) == ["lyon", "nice", "paris"]  # lille's 2 users are under the threshold: in the remainder
    assert sums == pytest.approx({c: v for c, v in _exact(frame, "SELECT city, SUM(age) FROM logs GROUP BY city").items() if c in cities})
    assert means == pytest.approx({c: v for c, v in _exact(frame, "SELECT city, AVG(age) FROM logs GROUP BY city").items() if c in cities})


def test_a_total_filtered_on_a_released_key_equals_duckdb(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(2):
        logs.cursor().execute("SELECT city, COUNT(*) FROM logs GROUP BY city", epsilon=1.0)
        (total,) = logs.cursor().execute("SELECT SUM(age) FROM logs WHERE city = 'nice'", epsilon=1.0).fetchone()
        (whole,) = logs.cursor().execute("SELECT SUM(age) FROM logs", epsilon=1.0).fetchone()
    assert total == pytest.approx(float(frame.age[frame.city == "nice"].sum()))
    assert whole == pytest.approx(float(frame.age.sum()))  # the remainder's rows (lille) are counted in totals


def test_sum_by_released_tuples_of_two_columns_equals_duckdb(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(3):
        logs.cursor().execute("SELECT city, job, COUNT(*) FROM logs GROUP BY city, job", epsilon=1.0)
        rows = logs.cursor().execute("SELECT city, job, SUM(age) FROM logs GROUP BY city, job", epsilon=1.0).fetchall()
    exact = _exact(frame, "SELECT city, job, SUM(age) FROM logs GROUP BY city, job")
    assert rows and {tuple(r[:2]): r[2] for r in rows} == pytest.approx({tuple(r[:2]): exact.get(tuple(r[:2]), 0.0) for r in rows}, abs=1e-6)


def test_sum_and_avg_in_the_statement_that_selects_the_keys_equal_duckdb_on_the_released_keys(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    """One statement selects city's keys at a share of ε (from their distinct units) and measures COUNT, SUM and AVG
    over the released keys with the rest; noise off, its rows are DuckDB's on those keys, charged once."""
    sql = "SELECT city, COUNT(*), SUM(age), AVG(age) FROM logs GROUP BY city"
    chosen = prepare(logs, [sql], epsilon=1.0).selection.split  # type: ignore[union-attr]
    assert 0 < chosen.fraction < 1 and chosen.count_privacy.epsilon == pytest.approx(1.0 - chosen.fraction)
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(4):
        rows = logs.cursor().execute(sql, epsilon=1.0).fetchall()
    exact = {r[0]: r[1:] for r in duckdb.query_df(frame, "logs", sql).fetchall()}
    assert {"paris", "lyon", "nice"} <= {r[0] for r in rows}
    assert {r[0]: r[1:] for r in rows} == {c: pytest.approx(exact[c]) for c in (r[0] for r in rows)}
    spent = logs.budget_spent()
    assert spent.statements == 1 and spent.epsilon == pytest.approx(1.0) and spent.delta == pytest.approx(chosen.primitive.delta)
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(5):  # the keys are cached: a later statement selects nothing
        logs.cursor().execute("SELECT city, SUM(age) FROM logs GROUP BY city", epsilon=1.0)
    assert logs.budget_spent().delta == spent.delta

