"""Statements of several grouping sets planned so that every set is at least as accurate as measured on its own
share (``planner.plan_balanced``), and SUM alone priced as the one query it is (``ValueEncoding.sum_only``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
from conftest import ADULT_SCHEMA, make_adult
from dpsql.sql.moments import ValueEncoding


@pytest.fixture(scope="module")
def connection():  # noqa: ANN201
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    conn.register("adult", make_adult(persons=600, seed=5), schema=ADULT_SCHEMA)
    yield conn
    conn.close()


def _rows(connection: dpsql.Connection, sql: str, section: str) -> list[tuple]:
    return [r for r in connection.cursor().execute("EXPLAIN " + sql, epsilon=1.0).fetchall() if r[0] == section]


def test_a_cube_states_each_grouping_set_against_its_own_share(connection: dpsql.Connection) -> None:
    balance = _rows(connection, "SELECT sex, race, COUNT(*) FROM adult GROUP BY CUBE (sex, race)", "balance")
    assert [r[1] for r in balance] == ["(sex, race)", "(sex)", "(race)", "()"]
    assert all(r[2] <= 1 + 1e-6 for r in balance) and balance[3][3].endswith("(docs/glossary.md#balance)")
    assert not _rows(connection, "SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race", "balance")


def test_sum_alone_is_one_query_per_group(connection: dpsql.Connection) -> None:
    """SUM alone on an exact grid: one released value per group, priced as such; with AVG the block asks C, U
    and C + U (and on a rounded grid too: its rounding bound needs the count)."""
    (alone,) = _rows(connection, "SELECT sex, SUM(age) FROM adult GROUP BY sex", "query")  # an exact grid
    (with_avg,) = _rows(connection, "SELECT sex, SUM(age), AVG(age) FROM adult GROUP BY sex", "query")
    assert alone[3].startswith("2 released value(s)") and with_avg[3].startswith("6 released value(s)")
    encoding = ValueEncoding("v", -10.0, 30.0, 4096, 1, False, sum_only=True)
    np.testing.assert_allclose(encoding.block(), [[-10 / 30, 1.0]])
    values, errors = encoding.released("SUM", np.array([[2.0], [-1.0]]), np.array([[4.0], [9.0]]))
    assert values == [60.0, -30.0] and errors == [pytest.approx(60.0), pytest.approx(90.0)]


def test_noise_off_sums_of_a_cube_equal_duckdb(connection: dpsql.Connection) -> None:
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute("SELECT sex, SUM(age) FROM adult GROUP BY ROLLUP (sex)", epsilon=1.0).fetchall()
    frame = make_adult(persons=600, seed=5)
    expected = {**frame.groupby("sex")["age"].sum().to_dict(), None: frame["age"].sum()}
    assert {sex: round(total, 6) for sex, total in rows} == pytest.approx({k: float(v) for k, v in expected.items()})
