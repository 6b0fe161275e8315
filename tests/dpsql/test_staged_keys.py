"""Two columns without a declared domain in one GROUP BY, selected in stages (``planner.staged_selection``).

One row per user, so key bounding keeps every row and, with the noise off, every released cell is DuckDB's exact
count. ``job`` has three large keys and ``city`` many smaller ones (a NULL city among them): the first stage
releases every job and the larger cities, the cities' released keys hold fewer rows than the jobs', so the
second stage selects the cities again over the jobs' keys — a city is released with all its (city, job) cells,
zeros included, when its total reaches the threshold for 3 + 1 cells.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from city_job_tables import connection_with, exact, frame, logs  # noqa: F401 - the fixtures
from pipeline_helpers import prepare

import dpsql
import dpsql.testing

UNITS = {
    ("paris", 1): 50, ("paris", 2): 30, ("paris", 3): 20, ("lyon", 1): 30, ("lyon", 2): 30, ("nice", 1): 20, ("nice", 3): 12,
    ("lille", 2): 10, ("lille", 1): 2, ("metz", 3): 2, (None, 1): 18, (None, 2): 5,
}
PAIRS = "SELECT city, job, COUNT(*) FROM logs GROUP BY city, job"
EPSILON = 10.0  # the first stage's 1/20 of it per column releases keys of a few dozen rows


_exact = exact


def _totals(frame: pd.DataFrame, column: str) -> dict[object, int]:
    return {k[0]: n for k, n in _exact(frame, f"SELECT {column}, COUNT(*) FROM logs GROUP BY {column}").items()}


def test_noise_free_cells_are_duckdbs_over_the_jobs_for_every_city_reaching_the_second_threshold(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    staged = prepare(logs, [PAIRS], epsilon=EPSILON).selection.staged.stages  # type: ignore[union-attr]
    first, second = staged.first[0].threshold, staged.second(4).threshold
    jobs, cities = _totals(frame, "job"), _totals(frame, "city")
    assert min(jobs.values()) >= first and sum(n for n in cities.values() if n >= first) < sum(jobs.values())  # the cities are selected again
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(1):
        rows = logs.cursor().execute(PAIRS, epsilon=EPSILON).fetchall()
    released = [c for c, n in cities.items() if n >= second]
    assert 0 < len(released) < len(cities) and None in released
    exact = _exact(frame, PAIRS)
    assert {tuple(r[:2]): r[2] for r in rows} == {(c, j): exact.get((c, j), 0) for c in released for j in jobs}


def test_a_declared_column_beside_them_gives_each_city_its_cells_over_jobs_and_sexes(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    sql = "SELECT city, job, sex, COUNT(*) FROM logs GROUP BY city, job, sex"
    staged = prepare(logs, [sql], epsilon=EPSILON).selection.staged.stages  # type: ignore[union-attr]
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(2):
        rows = logs.cursor().execute(sql, epsilon=EPSILON).fetchall()
    cities = [c for c, n in _totals(frame, "city").items() if n >= staged.second(4 * 2).threshold]
    exact = _exact(frame, sql)
    assert cities and {tuple(r[:3]): r[3] for r in rows} == {(c, j, s): exact.get((c, j, s), 0) for c in cities for j in (1, 2, 3) for s in "FM"}


def test_the_charge_is_the_sum_of_the_stages_and_within_the_selection_delta(logs: dpsql.Connection) -> None:
    staged = prepare(logs, [PAIRS], epsilon=EPSILON).selection.staged.stages  # type: ignore[union-attr]
    with dpsql.testing.seeded(3):
        logs.cursor().execute(PAIRS, epsilon=EPSILON)
    spent, allowed = logs.budget_spent(), logs._session.selection_delta()
    stages = [r.key_privacy.epsilon for r in staged.first] + [staged.second_privacy.epsilon]
    assert spent.statements == 1 and spent.epsilon == pytest.approx(EPSILON) and sum(stages) == pytest.approx(EPSILON)
    assert spent.delta == pytest.approx(sum(r.delta for r in staged.first) + staged.second_delta) and spent.delta <= allowed
    assert staged.second(staged.max_cells).delta <= staged.second_delta  # the second stage spends at most what is reserved


def test_released_keys_are_cached_and_a_later_statement_counts_their_product_without_a_selection(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(4):
        first = {tuple(r[:2]) for r in logs.cursor().execute(PAIRS, epsilon=EPSILON).fetchall()}
        delta = logs.budget_spent().delta
        rows = logs.cursor().execute(PAIRS, epsilon=1.0).fetchall()
    assert {tuple(r[:2]) for r in rows} == first and logs.budget_spent().delta == delta
    exact = _exact(frame, PAIRS)
    assert {tuple(r[:2]): r[2] for r in rows} == pytest.approx({k: exact.get(k, 0) for k in first}, abs=1e-9)


@pytest.mark.parametrize("rows", [0, 5])
def test_no_key_released_gives_no_row_and_is_charged(rows: int) -> None:
    """An empty table, and one too small for either stage: the release is total — no row — and charged."""
    frame = pd.DataFrame(
        {"user_id": np.arange(rows), "city": pd.Series(["paris"] * rows, dtype="string"), "job": np.ones(rows, dtype=np.int64),
         "sex": pd.Series(["F"] * rows, dtype="string")}
    )
    connection = connection_with(frame)
    with dpsql.testing.seeded(5):
        assert connection.cursor().execute(PAIRS, epsilon=1.0).fetchall() == []
    assert connection.budget_spent().statements == 1


def test_explain_states_the_stages_and_their_split(logs: dpsql.Connection) -> None:
    rows = {(r[0], r[1]): r[2] for r in logs.cursor().execute(f"EXPLAIN {PAIRS}", epsilon=EPSILON).fetchall()}
    assert rows[("keys", "staged")] == 2.0 and rows[("split", "first stage share")] == pytest.approx(0.1)
    assert rows[("selection", "first stage threshold")] > 1 and rows[("cost", "epsilon")] == pytest.approx(EPSILON)
    assert logs.budget_spent().statements == 0


def test_a_cube_gives_each_columns_subtotals_over_every_row(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    """CUBE (city, job): the cities are selected over the jobs' released keys, so the (city, job) cells and the city
    subtotals are per released city, and the job subtotals and the grand total — summing over the cities — are
    measured over every row (the unreleased cities' rows in the remainder); noise off, all equal DuckDB's."""
    sql = "SELECT city, job, GROUPING(city, job) AS g, COUNT(*) FROM logs GROUP BY CUBE (city, job)"
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(6):
        rows = logs.cursor().execute(sql, epsilon=EPSILON).fetchall()
    cities = {r[0] for r in rows if r[2] == 0}
    exact = _exact(frame, PAIRS)
    assert "metz" not in cities and {"paris", None} <= cities
    assert {(r[0], r[1]): r[3] for r in rows if r[2] == 0} == {(c, j): exact.get((c, j), 0) for c in cities for j in (1, 2, 3)}
    assert {r[0]: r[3] for r in rows if r[2] == 1} == {c: n for c, n in _totals(frame, "city").items() if c in cities}
    assert {r[1]: r[3] for r in rows if r[2] == 2} == _totals(frame, "job")
    assert [r[3] for r in rows if r[2] == 3] == [len(frame)]


def test_public_keys_beyond_the_second_stage_cells_keep_their_largest(monkeypatch: pytest.MonkeyPatch, logs: dpsql.Connection) -> None:
    """The jobs' released keys are cut after the first stage so that a city's cells fit the cap (post-processing of
    the first stage: never a failure): with room for 3 cells, the 2 jobs of largest totals and the remainder."""
    from dpsql import selection

    monkeypatch.setattr(selection, "MAX_STAGED_CELLS", 3)
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(7):
        rows = logs.cursor().execute(PAIRS, epsilon=EPSILON).fetchall()
    assert {r[1] for r in rows} == {1, 2}  # job 3 (34 rows) is cut: its rows are in the jobs' remainder
