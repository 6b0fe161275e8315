"""SUM/AVG/VARIANCE/STDDEV grouped by two columns without a declared domain, in the statement that selects their keys.

The stages select keys only, at the planner's share of the budget (``planner.split_staged_selection``): each column's
keys from its noisy totals, then the column whose released keys hold the fewest rows from its keys' totals alone; the
statement's moment cells are then measured over every tuple of the released keys with the rest — one read, one
charge. One row per user, so key bounding keeps every row; ``age`` is an integer column with integer bounds, so its
grid is exact and, with the noise off, every released value is DuckDB's exact answer over the released tuples (a
released tuple without rows: COUNT and SUM 0, AVG NULL). ``job`` has three large keys and ``city`` smaller ones (a
NULL city among them): the first stage releases every job, and the cities are selected again from their totals.
"""

from __future__ import annotations

import math

import duckdb
import pandas as pd
import pytest
from city_job_tables import frame_of
from pipeline_helpers import prepare

import dpsql
import dpsql.testing

UNITS = {
    ("paris", 1): 50, ("paris", 2): 30, ("paris", 3): 30, ("lyon", 1): 30, ("lyon", 2): 30, ("nice", 1): 20, ("nice", 3): 12,
    ("lille", 2): 10, ("lille", 1): 2, ("metz", 3): 2, (None, 1): 18, (None, 2): 5,
}
SCHEMA = {
    "privacy_unit": "user_id", "max_rows_per_unit": 1,
    "columns": {"sex": {"categories": ["F", "M"]}, "city": "unknown", "job": "unknown", "age": {"bounds": [0, 100]}},
}
EPSILON = 10.0  # the first stage's share releases keys of a few dozen rows
MOMENTS = "SELECT city, job, COUNT(*), SUM(age), AVG(age) FROM logs GROUP BY city, job"


def _frame(units: dict[tuple[str | None, int], int]) -> pd.DataFrame:
    frame = frame_of(units)
    ages = pd.array((frame.user_id * 37) % 83 + 5, dtype="Int64")
    ages[::11] = pd.NA  # NULL ages: SUM and AVG skip them, COUNT(*) counts them
    return frame.assign(age=ages)


@pytest.fixture
def frame() -> pd.DataFrame:
    return _frame(UNITS)


def _connection(frame: pd.DataFrame) -> dpsql.Connection:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=100.0, delta=1e-5))
    connection.register("logs", frame, schema=SCHEMA)
    return connection


@pytest.fixture
def logs(frame: pd.DataFrame) -> dpsql.Connection:
    return _connection(frame)


def _exact(frame: pd.DataFrame, sql: str, keys: int) -> dict[tuple[object, ...], tuple[object, ...]]:
    """DuckDB's rows of ``sql`` over ``frame``, by their first ``keys`` columns."""
    return {tuple(r[:keys]): tuple(r[keys:]) for r in duckdb.query_df(frame, "logs", sql).fetchall()}


def _totals(frame: pd.DataFrame, column: str) -> dict[object, int]:
    return {k[0]: int(v[0]) for k, v in _exact(frame, f"SELECT {column}, COUNT(*) FROM logs GROUP BY {column}", 1).items()}


def _equal(released: tuple[object, ...], exact: tuple[object, ...]) -> bool:
    return all((a is None) == (b is None) and (a is None or math.isclose(a, float(b), rel_tol=1e-9, abs_tol=1e-9)) for a, b in zip(released, exact))  # type: ignore[arg-type]


def test_noise_free_sums_and_averages_of_every_released_tuple_are_duckdbs(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    measured = prepare(logs, [MOMENTS], epsilon=EPSILON).selection.measured.split  # type: ignore[union-attr]
    first, second = measured.stages.first[0].threshold, measured.second.threshold
    jobs, cities = _totals(frame, "job"), _totals(frame, "city")
    assert min(jobs.values()) >= first and sum(n for n in cities.values() if n >= first) < sum(jobs.values())  # the cities are selected again
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(1):
        result = logs.cursor().execute(MOMENTS, epsilon=EPSILON)
        rows, errors = result.fetchall(), result.errors
    released = [c for c, n in cities.items() if n >= second]
    assert 0 < len(released) < len(cities) and None in released
    exact = _exact(frame, MOMENTS, 2)
    assert {tuple(r[:2]) for r in rows} == {(c, j) for c in released for j in jobs}  # every tuple of the released keys
    assert all(_equal(r[2:], exact.get(tuple(r[:2]), (0, 0, None))) for r in rows)
    assert ("lyon", 3) not in exact and any(r[:2] == ("lyon", 3) for r in rows)  # a released tuple without rows: 0, 0, NULL
    assert all(e[2] > 0 and e[3] > 0 for e in errors) and all(e[4] > 0 for r, e in zip(rows, errors) if r[4] is not None)


def test_variances_and_deviations_are_duckdbs_beside_a_declared_column(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    sql = "SELECT city, job, sex, COUNT(*), SUM(age), VAR_POP(age), STDDEV_SAMP(age) FROM logs GROUP BY city, job, sex"
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(2):
        rows = logs.cursor().execute(sql, epsilon=EPSILON).fetchall()
    exact = _exact(frame, sql, 3)
    assert {r[2] for r in rows} == {"F", "M"} and "paris" in {r[0] for r in rows}
    several = [r for r in rows if exact.get(tuple(r[:3]), (0,))[0] > 2]  # a variance needs rows with ages: DuckDB's
    assert len(several) > 10
    for row in several:
        assert row[3:5] == pytest.approx(exact[tuple(row[:3])][:2]) and row[5:] == pytest.approx(exact[tuple(row[:3])][2:], rel=1e-6, abs=1e-6)


def test_a_cube_of_sums_counts_every_row_in_the_subtotals_over_the_cities(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    """CUBE (city, job): the (city, job) cells and city subtotals of the released cities, the job subtotals and the
    grand total over every row (unreleased cities' rows in the remainder); noise off, all DuckDB's."""
    sql = "SELECT city, job, GROUPING(city, job) AS g, COUNT(*), SUM(age) FROM logs GROUP BY CUBE (city, job)"
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(3):
        rows = logs.cursor().execute(sql, epsilon=EPSILON).fetchall()
    exact = _exact(frame, sql, 3)
    cities = {r[0] for r in rows if r[2] == 0}
    assert "metz" not in cities and {"paris", None} <= cities
    assert all(_equal(r[3:], exact.get(tuple(r[:3]), (0, 0))) for r in rows)  # a tuple without rows: COUNT and SUM 0
    assert {r[1] for r in rows if r[2] == 2} == {1, 2, 3} and [r[3:] for r in rows if r[2] == 3] == [(len(frame), float(frame.age.sum()))]


def test_one_charge_of_the_statements_epsilon_and_the_stages_delta(logs: dpsql.Connection) -> None:
    selection = prepare(logs, [MOMENTS], epsilon=EPSILON).selection
    measured = selection.measured.split  # type: ignore[union-attr]
    spent_by_stages = measured.stages.privacy.epsilon
    assert 0 < measured.fraction < 1 and spent_by_stages + measured.count_privacy.epsilon == pytest.approx(EPSILON)
    assert spent_by_stages == pytest.approx(measured.fraction * EPSILON)
    with dpsql.testing.seeded(4):
        logs.cursor().execute(MOMENTS, epsilon=EPSILON).fetchall()
    spent = logs.budget_spent()
    assert spent.statements == 1 and spent.epsilon == pytest.approx(EPSILON)
    assert spent.delta == pytest.approx(measured.stages.delta) and spent.delta <= logs._session.selection_delta()


def test_the_keys_are_cached_and_a_later_statement_measures_over_them_without_a_selection(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(5):
        first = {tuple(r[:2]) for r in logs.cursor().execute(MOMENTS, epsilon=EPSILON).fetchall()}
        delta = logs.budget_spent().delta
        rows = logs.cursor().execute("SELECT city, job, SUM(age) FROM logs GROUP BY city, job", epsilon=1.0).fetchall()
    assert {tuple(r[:2]) for r in rows} == first and logs.budget_spent().delta == delta
    exact = _exact(frame, MOMENTS, 2)
    assert {tuple(r[:2]): r[2] for r in rows} == pytest.approx({k: exact.get(k, (0, 0))[1] for k in first})


def test_a_table_too_small_for_the_first_stage_selects_the_tuples_from_their_totals() -> None:
    """No job reaches the first stage's threshold, so no key is public: the tuples are selected by the second stage
    (one cell each), and those reaching its threshold are shown — the others hidden — with DuckDB's sums."""
    units = {("a", 1): 30, ("a", 2): 2, ("b", 2): 20, ("b", 3): 14, ("c", 3): 1}
    frame = _frame(units)
    logs = _connection(frame)
    measured = prepare(logs, [MOMENTS], epsilon=EPSILON).selection.measured.split  # type: ignore[union-attr]
    second = measured.second.threshold
    assert max(_totals(frame, "job").values()) < measured.stages.first[0].threshold and 2 < second < 14
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(6):
        rows = logs.cursor().execute(MOMENTS, epsilon=EPSILON).fetchall()
    exact = _exact(frame, MOMENTS, 2)
    assert {tuple(r[:2]) for r in rows} == {k for k, n in units.items() if n >= second}  # ("a", 3) and ("b", 1): not released tuples
    assert all(_equal(r[2:], exact[tuple(r[:2])]) for r in rows)


@pytest.mark.parametrize("rows", [0, 5])
def test_no_key_released_gives_no_row_and_is_charged(rows: int) -> None:
    logs = _connection(_frame({("paris", 1): rows}) if rows else _frame({}).astype({"city": "string", "sex": "string"}))
    with dpsql.testing.seeded(7):
        assert logs.cursor().execute(MOMENTS, epsilon=1.0).fetchall() == []
    assert logs.budget_spent().statements == 1


def test_explain_states_the_split_and_both_thresholds(logs: dpsql.Connection) -> None:
    rows = {(r[0], r[1]): r[2] for r in logs.cursor().execute(f"EXPLAIN {MOMENTS}", epsilon=EPSILON).fetchall()}
    assert rows[("keys", "staged")] == 2.0 and rows[("cost", "epsilon")] == pytest.approx(EPSILON)
    assert rows[("cost", "selection epsilon")] + rows[("cost", "measurement epsilon")] == pytest.approx(EPSILON)
    assert 0 < rows[("split", "selection fraction")] < 1 and rows[("split", "first stage share")] == pytest.approx(0.1)
    assert rows[("selection", "first stage threshold")] > rows[("selection", "second stage threshold")] > 1
    assert logs.budget_spent().statements == 0


def test_one_column_selected_over_anothers_released_keys_by_its_totals(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    """The jobs' keys released by an earlier statement are public: the cities are selected over them by one threshold
    on their totals at the planner's share, the sums measured over every (city, job) of the released keys with the rest;
    noise off, DuckDB's."""
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(9):
        jobs = {r[0] for r in logs.cursor().execute("SELECT job, COUNT(*) FROM logs GROUP BY job", epsilon=EPSILON).fetchall()}
        measured = prepare(logs, [MOMENTS], epsilon=EPSILON).selection.measured.split  # type: ignore[union-attr]
        explained = {(r[0], r[1]): r[2] for r in logs.cursor().execute(f"EXPLAIN {MOMENTS}", epsilon=EPSILON).fetchall()}
        rows = logs.cursor().execute(MOMENTS, epsilon=EPSILON).fetchall()
    assert measured.stages is None and jobs == {1, 2, 3}
    assert explained[("keys", "public")] == 3 and explained[("selection", "threshold")] == measured.second.threshold
    assert explained[("cost", "selection epsilon")] + explained[("cost", "measurement epsilon")] == pytest.approx(EPSILON)
    cities = [c for c, n in _totals(frame, "city").items() if n >= measured.second.threshold]
    assert 0 < len(cities) < len(_totals(frame, "city"))
    exact = _exact(frame, MOMENTS, 2)
    assert {tuple(r[:2]) for r in rows} == {(c, j) for c in cities for j in jobs}
    assert all(_equal(r[2:], exact.get(tuple(r[:2]), (0, 0, None))) for r in rows)
    spent = logs.budget_history()[-1]
    assert spent.epsilon == pytest.approx(EPSILON) and spent.delta == pytest.approx(measured.second.delta)


def test_what_stays_refused_is_refused_before_the_read(frame: pd.DataFrame) -> None:
    """``clip: auto`` and ``bounds: auto`` choose clips from declared domains' rows only; COUNT of a column whose keys
    are selected: refused, nothing charged."""
    for spec in ({"bounds": [0, 100], "clip": "auto"}, {"bounds": "auto"}):
        logs = dpsql.connect(budget=dpsql.Budget(epsilon=100.0, delta=1e-5))
        logs.register("logs", frame, schema={**SCHEMA, "columns": {**SCHEMA["columns"], "age": spec}})
        for sql in (MOMENTS, "SELECT city, SUM(age) FROM logs GROUP BY city"):  # one column: its sums used to read as 0
            with pytest.raises(dpsql.NotSupportedError, match="clip: auto and bounds: auto choose their clips from the rows of declared domains"):
                logs.cursor().execute(sql, epsilon=EPSILON)
        assert logs.budget_spent().statements == 0
    logs = _connection(frame)
    with pytest.raises(dpsql.NotSupportedError, match="COUNT of one of them, or a predicate on it"):
        logs.cursor().execute("SELECT city, job, COUNT(city), SUM(age) FROM logs GROUP BY city, job", epsilon=EPSILON)
    assert logs.budget_spent().statements == 0
