"""Several columns without a declared domain in one statement: their keys are selected jointly, as tuples.

``GROUP BY city, job`` selects in stages (``planner.staged_selection``, ``tests/dpsql/test_staged_keys.py``); on
these few rows at ε = 1 its first stage releases no key of either column, so its second stage selects the tuples
jointly (``StagedDesign.tuples``) — the design tested here, as a statement asking totals beside the tuples
uses it from the start. The data are built so that every tuple's count is known: one row per user, ``units[(city, job)]`` users
per tuple, so key bounding keeps every row and the exact answer is DuckDB's ``GROUP BY city, job``.
"""

from __future__ import annotations

import pandas as pd
import pytest
from city_job_tables import connection_with, exact, frame, logs  # noqa: F401 - the fixtures
from pipeline_helpers import prepare

import dpsql
import dpsql.testing

UNITS = {("paris", 1): 40, ("paris", 2): 3, ("lyon", 1): 25, ("lyon", 3): 1, ("nice", 2): 60, ("nice", 3): 30, ("lille", 1): 2}
PAIRS = "SELECT city, job, COUNT(*) FROM logs GROUP BY city, job"
WITH_TOTALS = "SELECT city, job, sex, COUNT(*) FROM logs GROUP BY GROUPING SETS ((city, job, sex), (sex), ())"


_exact = exact


def test_noise_free_released_tuples_are_duckdbs_groups_reaching_the_threshold(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    staged = prepare(logs, [PAIRS], epsilon=1.0).selection.staged  # type: ignore[union-attr]
    assert staged.stages.first[0].threshold > 90  # no city or job reaches the first stage's threshold: tuples, jointly
    threshold = staged.tuples.release.threshold
    exact = _exact(frame, PAIRS)
    assert 3 < threshold < 25  # some tuples each side of it
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(1):
        released = {tuple(row[:-1]): row[-1] for row in logs.cursor().execute(PAIRS, epsilon=1.0).fetchall()}
    assert released == {key: n for key, n in exact.items() if n >= threshold}


def test_totals_count_every_row_including_unreleased_tuples(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    threshold = prepare(logs, [WITH_TOTALS], epsilon=1.0).selection.staged.tuples.release.threshold  # type: ignore[union-attr]
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(2):
        rows = logs.cursor().execute(WITH_TOTALS, epsilon=1.0).fetchall()
    cells = {tuple(r[:3]): r[3] for r in rows if r[0] is not None}
    totals = {r[2]: r[3] for r in rows if r[0] is None}
    exact_cells = _exact(frame, "SELECT city, job, sex, COUNT(*) FROM logs GROUP BY city, job, sex")
    per_tuple = _exact(frame, PAIRS)
    assert cells == {k: n for k, n in exact_cells.items() if per_tuple[k[:2]] >= threshold}
    assert totals == {**{k[0]: n for k, n in _exact(frame, "SELECT sex, COUNT(*) FROM logs GROUP BY sex").items()}, None: len(frame)}


def test_count_of_one_of_the_columns_is_refused_before_the_read(logs: dpsql.Connection) -> None:
    with pytest.raises(dpsql.NotSupportedError, match=r"COUNT of one of them.*run GROUP BY city on its own first"):
        logs.cursor().execute("SELECT city, job, COUNT(city) FROM logs GROUP BY city, job", epsilon=1.0)
    assert logs.budget_spent().statements == 0


def test_the_statement_is_charged_its_budget_and_the_selection_delta_once(logs: dpsql.Connection) -> None:
    rule = prepare(logs, [PAIRS], epsilon=1.0).selection.staged.stages  # type: ignore[union-attr]
    logs.cursor().execute(PAIRS, epsilon=1.0)
    spent = logs.budget_spent()
    assert spent.statements == 1 and spent.epsilon == pytest.approx(1.0) and spent.delta == pytest.approx(rule.delta)
    assert 0 < rule.delta <= 1e-5


def test_released_tuples_give_each_column_its_keys_for_later_statements(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    """After the joint release, each column's keys are the parts of released tuples: a later GROUP BY over both
    counts every cell of their product (public now) and pays no selection δ; its rows equal DuckDB's."""
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(3):
        released = {tuple(row[:2]) for row in logs.cursor().execute(PAIRS, epsilon=1.0).fetchall()}
        delta = logs.budget_spent().delta
        rows = logs.cursor().execute(PAIRS, epsilon=1.0).fetchall()
    cities, jobs = sorted({c for c, _ in released}), sorted({j for _, j in released})
    exact = _exact(frame, PAIRS)
    assert {tuple(r[:2]): r[2] for r in rows} == pytest.approx({(c, j): exact.get((c, j), 0) for c in cities for j in jobs}, abs=1e-9)
    assert logs.budget_spent().delta == delta


def test_error_bars_are_the_selected_law_and_far_above_the_threshold_the_noise_law(logs: dpsql.Connection) -> None:
    """A tuple of 60 rows lies far above the threshold at ε = 1: its interval is the discrete Laplace's own (scale
    1/ε₂ for a unit adding one row to one tuple, ε₂ = 0.9 the second stage's share): 95 % central half-width 3 over z
    — never 0, never the normal guess."""
    rule = prepare(logs, [PAIRS], epsilon=1.0).selection.staged.tuples.release  # type: ignore[union-attr]
    with dpsql.testing.seeded(4):
        cursor = logs.cursor().execute(PAIRS, epsilon=1.0)
        rows, errors = cursor.fetchall(), cursor.errors
    nice = [e[-1] for r, e in zip(rows, errors) if r[:2] == ("nice", 2)]
    assert rule.noise_parameter == pytest.approx(1 / 0.9) and nice == [pytest.approx(3 / 1.959963984540054)]


def test_with_one_columns_keys_released_the_other_is_selected_over_them(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    """``GROUP BY job`` first, then ``GROUP BY city, job``: job's released keys are a public domain, so each city is
    selected by its noisy total over all of them and every (city, job) cell of a released city is released
    (zeros included); noise off, the cells equal DuckDB's and the city threshold is the one-column design's
    for a key of |jobs| + 1 cells."""
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(5):
        jobs = sorted(r[0] for r in logs.cursor().execute("SELECT job, COUNT(*) FROM logs GROUP BY job", epsilon=1.0).fetchall())
        selection = prepare(logs, [PAIRS], epsilon=1.0).selection
        rows = logs.cursor().execute(PAIRS, epsilon=1.0).fetchall()
    rule = selection.thresholded.release  # type: ignore[union-attr]
    assert jobs == [1, 2, 3] and rule.cells == len(jobs) + 1 and selection.column == "city"  # type: ignore[union-attr]
    exact = _exact(frame, PAIRS)
    cities = {c: sum(n for (city, _), n in exact.items() if city == c) for c, _ in exact}
    released = sorted(c for c, n in cities.items() if n >= rule.threshold)
    assert 0 < len(released) < len(cities)
    assert {tuple(r[:2]): r[2] for r in rows} == {(c, j): exact.get((c, j), 0) for c in released for j in jobs}


def test_over_released_keys_of_one_column_a_cube_gives_its_subtotals_over_every_row(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(6):
        logs.cursor().execute("SELECT job, COUNT(*) FROM logs GROUP BY job", epsilon=1.0)
        rows = logs.cursor().execute("SELECT city, job, COUNT(*) FROM logs GROUP BY CUBE (city, job)", epsilon=1.0).fetchall()
    jobs = {r[1]: r[2] for r in rows if r[0] is None and r[1] is not None}
    assert jobs == {k[0]: n for k, n in _exact(frame, "SELECT job, COUNT(*) FROM logs GROUP BY job").items()}
    assert [r[2] for r in rows if r[0] is None and r[1] is None] == [len(frame)]


def test_released_tuples_spanning_too_many_cells_keep_the_largest_that_fit(monkeypatch: pytest.MonkeyPatch, logs: dpsql.Connection) -> None:
    """The product of the columns' released keys is bounded after the read by post-processing (never a failure):
    with room for 2 × 2 key cells (and their remainders), the tuples of largest noisy totals that fit are kept."""
    from dpsql import selection

    monkeypatch.setattr(selection, "MAX_JOINT_CELLS", 9)
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(7):
        released = {tuple(r[:2]): r[2] for r in logs.cursor().execute(PAIRS, epsilon=1.0).fetchall()}
    assert released == {("nice", 2): 60, ("paris", 1): 40}  # then (nice, 3) and (lyon, 1) would need 3 × 4 cells


def test_count_of_the_column_selected_over_public_keys_is_refused_before_the_read(logs: dpsql.Connection) -> None:
    """COUNT(city) selects city's keys by a split of ε (from their distinct units), which the tuples the read
    bounds beside a public column do not give: refused, free."""
    with dpsql.testing.seeded(8):
        logs.cursor().execute("SELECT job, COUNT(*) FROM logs GROUP BY job", epsilon=1.0)
    with pytest.raises(dpsql.NotSupportedError, match=r"GROUP BY city: its keys are selected over other columns' released keys only"):
        logs.cursor().execute("SELECT city, job, COUNT(city) FROM logs GROUP BY city, job", epsilon=1.0)
    assert logs.budget_spent().statements == 1


def test_a_bi_wrapper_around_a_statement_selecting_keys_shows_them_in_the_columns_type(logs: dpsql.Connection, frame: pd.DataFrame) -> None:
    """``SELECT * FROM (<statement>) AS virtual_table`` over a GROUP BY that selects its keys: prepare checks the shell
    over an example key of the column's engine type (it was refused: the stand-in key has no SQL type), and the
    released integer keys stay integers."""
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(9):
        rows = logs.cursor().execute("SELECT * FROM (SELECT job, COUNT(*) AS n FROM logs GROUP BY job) AS virtual_table LIMIT 1000", epsilon=1.0).fetchall()
    assert rows == [(job, float(n)) for (job,), n in sorted(_exact(frame, "SELECT job, COUNT(*) FROM logs GROUP BY job").items())]
    assert all(isinstance(job, int) for job, _ in rows)
