"""``non_negative=True``: NNLS post-processing of the released measurement (dpsql.nonnegative)."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
from pipeline_helpers import prepare
from planner.strategies.residual import CoefficientCandidate

CUBE = "SELECT a, b, COUNT(*) FROM t GROUP BY CUBE (a, b)"
PAIR = "SELECT a, b, COUNT(*) FROM t GROUP BY a, b"
SCHEMA = {"columns": {"a": {"range": [0, 3]}, "b": {"range": [0, 2]}, "x": {"range": [0, 63]}}}
# 72 range counts over an ordered 64-value column: planned as a hat hierarchy (no non-negative fit)
RANGES = [f"SELECT COUNT(*) FROM t WHERE x BETWEEN {lo} AND {hi}" for lo in range(0, 64, 4) for hi in range(lo, 64, 8)]


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    data = pd.DataFrame({"a": rng.integers(0, 4, 300), "b": rng.integers(0, 3, 300), "x": rng.integers(0, 64, 300)})
    data.loc[data.a == 3, "b"] = 0  # empty cells (3, 1), (3, 2): GLS estimates of them go negative
    return data


def connect(frame: pd.DataFrame, **options: object) -> dpsql.Connection:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=100.0), **options)  # type: ignore[arg-type]
    connection.register("t", frame, schema=SCHEMA)
    return connection


def exact_pairs(frame: pd.DataFrame) -> dict[tuple[int, int], float]:
    counted = duckdb.query_df(frame, "t", "SELECT a, b, COUNT(*) FROM t GROUP BY a, b").fetchall()
    found = {(a, b): float(n) for a, b, n in counted}
    return {(a, b): found.get((a, b), 0.0) for a in range(4) for b in range(3)}


def counts(rows: list[tuple[object, ...]]) -> dict[tuple[object, ...], float]:
    return {row[:-1]: float(row[-1]) for row in rows}  # type: ignore[arg-type]


def assert_cube_consistent(released: dict[tuple[object, ...], float]) -> None:
    for a in range(4):
        assert released[(a, None)] == pytest.approx(sum(released[(a, b)] for b in range(3)), abs=1e-6)
    for b in range(3):
        assert released[(None, b)] == pytest.approx(sum(released[(a, b)] for a in range(4)), abs=1e-6)
    assert released[(None, None)] == pytest.approx(sum(released[(a, None)] for a in range(4)), abs=1e-6)


@pytest.mark.parametrize("reuse", [False, True])
def test_without_noise_the_answers_are_duckdbs_counts(frame: pd.DataFrame, reuse: bool) -> None:
    exact = exact_pairs(frame)
    connection = connect(frame, reuse=reuse)
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute(PAIR, epsilon=1.0, non_negative=True)
        assert counts(cursor.fetchall()) == pytest.approx(exact, abs=1e-6)
        assert " negative GLS answer(s); 0 answer(s) changed" in cursor.explanation
        cube = counts(cursor.execute(CUBE, epsilon=1.0, non_negative=True).fetchall())
        (batch,) = connection.workload([PAIR], epsilon=1.0, non_negative=True)
    assert {k: cube[k] for k in exact} == pytest.approx(exact, abs=1e-6)
    assert cube[(None, None)] == pytest.approx(len(frame), abs=1e-6)
    assert counts(batch.rows) == pytest.approx(exact, abs=1e-6)


@pytest.mark.parametrize("reuse", [False, True])
def test_noisy_cube_is_non_negative_consistent_and_costs_the_same(frame: pd.DataFrame, reuse: bool) -> None:
    released = {}
    for non_negative in (False, True):
        connection = connect(frame, reuse=reuse)
        cursor = connection.cursor()
        with dpsql.testing.seeded(3):  # the same measurement both times: the option is post-processing
            cursor.execute(CUBE, epsilon=0.05, non_negative=non_negative)
        released[non_negative] = counts(cursor.fetchall())
        spent = connection.budget_spent()
        assert (spent.epsilon, spent.statements) == (0.05, 1)
        errors = cursor.errors
    gls, fitted = released[False], released[True]
    assert min(gls.values()) < -10  # the test has something to fix
    assert min(fitted.values()) >= 0
    assert_cube_consistent(gls)
    assert_cube_consistent(fitted)
    assert fitted != pytest.approx(gls)
    assert all(e[-1] is not None and e[-1] > 0 for e in errors)  # GLS standard errors kept


def test_connection_default_and_per_call_override(frame: pd.DataFrame) -> None:
    connection = connect(frame, non_negative=True, reuse=False)
    cursor = connection.cursor()
    with dpsql.testing.seeded(3):
        cursor.execute(PAIR, epsilon=0.05)
    assert min(counts(cursor.fetchall()).values()) >= 0
    assert "non-negativity:" in cursor.explanation and "standard errors are the GLS ones" in cursor.explanation
    with dpsql.testing.seeded(3):
        cursor.execute(PAIR, epsilon=0.05, non_negative=False)
    assert min(counts(cursor.fetchall()).values()) < 0
    assert "non-negativity" not in cursor.explanation
    with dpsql.testing.seeded(3):  # executemany follows the connection's default
        cursor.executemany("SELECT a, COUNT(*) FROM t WHERE b = ? GROUP BY a", [[1], [2]], epsilon=0.02)
    rows = cursor.fetchall()
    assert [row[0] for row in rows] == [0, 1, 2, 3] * 2
    assert min(float(row[-1]) for row in rows) >= 0  # type: ignore[arg-type]
    assert "non-negativity: " in cursor.explanation and " 0 answer(s) changed" not in cursor.explanation
    with pytest.raises(dpsql.ProgrammingError, match="non_negative must be True or False"):
        cursor.execute(PAIR, epsilon=0.05, non_negative="yes")  # type: ignore[arg-type]
    with pytest.raises(dpsql.ProgrammingError, match="non_negative must be True or False"):
        dpsql.connect(budget=dpsql.Budget(epsilon=1.0), non_negative=1)  # type: ignore[arg-type]


def test_reused_answers_are_fitted_on_the_kept_measurements_for_free(frame: pd.DataFrame) -> None:
    connection = connect(frame, reuse=True)
    cursor = connection.cursor()
    with dpsql.testing.seeded(3):
        cursor.execute(CUBE, epsilon=0.05)
    spent = connection.budget_spent()
    cursor.execute(PAIR, epsilon=0.05, non_negative=True)  # in the row space of the CUBE's measurement
    pairs = counts(cursor.fetchall())
    assert connection.budget_spent() == spent
    assert min(pairs.values()) >= 0
    assert "fitted on the kept measurements" in cursor.explanation
    cursor.execute(CUBE, epsilon=0.05, non_negative=True)
    cube = counts(cursor.fetchall())
    assert {k: cube[k] for k in pairs} == pytest.approx(pairs, abs=1e-5)  # one fit: the same cells


def test_a_strategy_without_the_fit_falls_back_to_gls_with_a_note(frame: pd.DataFrame) -> None:
    connection = connect(frame, reuse=False)
    chosen = prepare(connection, RANGES, epsilon=1.0).plan
    assert chosen is not None and not isinstance(chosen.candidate, CoefficientCandidate)  # a range design
    released = {}
    for non_negative in (False, True):
        with dpsql.testing.seeded(5):
            released[non_negative] = connection.workload(RANGES, epsilon=1.0, non_negative=non_negative)
    assert connection.budget_spent().epsilon == pytest.approx(2.0)  # charged once each, nothing refused
    assert [r.rows for r in released[True]] == [r.rows for r in released[False]]
    assert "non-negative answers unavailable" not in released[False][0].explanation
    assert (
        "non-negative answers unavailable (non-negative answers are available for marginal-type strategies, "
        f"not {chosen.strategy_name}" in released[True][0].explanation
    )
    cursor = connection.cursor().execute(" UNION ALL ".join(RANGES), epsilon=1.0, non_negative=True)
    assert "released the GLS answers" in cursor.explanation
    assert connection.budget_spent().epsilon == pytest.approx(3.0)
