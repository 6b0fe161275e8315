"""Every entry point runs the same pipeline: the same SQL is accepted (and answered identically with noise
disabled) or refused identically before any data is read; EXPLAIN shows exactly the plan execution runs;
every statement text is parsed once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import sqlglot
from conftest import ADULT_SCHEMA, adult_corpus

import dpsql
import dpsql.testing
from dpsql import pipeline

SHAPES = {
    "plain": "SELECT sex, COUNT(*) FROM adult GROUP BY sex",
    "cube": "SELECT sex, race, COUNT(*) FROM adult GROUP BY CUBE (sex, race)",
    "rollup": "SELECT sex, job, GROUPING(sex, job) AS g, COUNT(*) FROM adult GROUP BY ROLLUP (sex, job)",
    "grouping sets": "SELECT sex, race, COUNT(*) FROM adult WHERE age > 30 GROUP BY GROUPING SETS ((sex), (race), ())",
    "union all": "SELECT sex, COUNT(*) FROM adult GROUP BY sex UNION ALL SELECT sex, COUNT(*) FROM adult WHERE age > 40 GROUP BY sex",
    "unknown keys": "SELECT browser, sex, COUNT(*) FROM adult GROUP BY browser, sex",
    "unknown keys in a cube": "SELECT browser, sex, COUNT(*) FROM adult GROUP BY CUBE (browser, sex)",
    "sums and averages": "SELECT sex, race, COUNT(*), SUM(age), AVG(age), STDDEV(age) FROM adult GROUP BY CUBE (sex, race)",
}
BATCH = ["SELECT sex, COUNT(*) FROM adult WHERE race = 0 GROUP BY sex", "SELECT sex, COUNT(*) FROM adult WHERE race = 1 GROUP BY sex"]
REFUSED = {
    "COUNT of one of two unknown columns": "SELECT browser, person_id, COUNT(browser) FROM adult GROUP BY browser, person_id",
    "unknown column": "SELECT colour, COUNT(*) FROM adult GROUP BY CUBE (colour)",
    "out of the grammar": "SELECT sex, ARG_MAX(job, age) FROM adult GROUP BY sex",
}

Rows = list[tuple[object, ...]]
EntryPoint = Callable[[dpsql.Connection, str], Rows]


def _execute(connection: dpsql.Connection, sql: str) -> Rows:
    return connection.cursor().execute(sql, epsilon=1.0).fetchall()


def _executemany(connection: dpsql.Connection, sql: str) -> Rows:
    return connection.cursor().executemany(sql, [()], epsilon=1.0).fetchall()


def _workload(connection: dpsql.Connection, sql: str) -> Rows:
    return connection.workload([sql], epsilon=1.0)[0].rows


ENTRY_POINTS: dict[str, EntryPoint] = {"execute": _execute, "executemany": _executemany, "workload": _workload}


def _same_rows(rows: Rows, expected: Rows) -> bool:
    return len(rows) == len(expected) and all(
        len(a) == len(b) and all(x == pytest.approx(y, abs=1e-9) if isinstance(y, float) else x == y for x, y in zip(a, b))
        for a, b in zip(rows, expected)
    )


def _fresh(frame: pd.DataFrame) -> dpsql.Connection:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=100.0, delta=1e-3))
    connection.register("adult", frame, schema=ADULT_SCHEMA)
    return connection


def _answer(frame: pd.DataFrame, entry: EntryPoint, sql: str) -> tuple[Rows, int]:
    """Rows with noise disabled and the same random draws (table salt, key selection) for every entry point."""
    with dpsql.testing.seeded(17), dpsql.testing.noise_disabled():
        connection = _fresh(frame)
        rows = entry(connection, sql)
    spent = connection.budget_spent().statements
    connection.close()
    return rows, spent


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_entry_point_answers_every_shape_identically(shape: str, adult_frame: pd.DataFrame) -> None:
    answers = {name: _answer(adult_frame, entry, SHAPES[shape]) for name, entry in ENTRY_POINTS.items()}
    reference, _ = answers["execute"]
    assert reference, shape
    for name, (rows, charges) in answers.items():
        assert charges == 1, name
        assert _same_rows(rows, reference), name


def test_a_batch_is_one_measurement_from_every_entry_point(adult_frame: pd.DataFrame) -> None:
    parametrized = "SELECT sex, COUNT(*) FROM adult WHERE race = ? GROUP BY sex"
    with dpsql.testing.seeded(3), dpsql.testing.noise_disabled():
        first = _fresh(adult_frame)
        many = first.cursor().executemany(parametrized, [(0,), (1,)], epsilon=0.5).fetchall()
        second = _fresh(adult_frame)
        batch = [row for result in second.workload(BATCH, epsilon=1.0) for row in result.rows]
    assert _same_rows(many, batch)
    assert first.budget_spent().epsilon == pytest.approx(1.0) == second.budget_spent().epsilon  # 2 × 0.5, charged once
    assert first.budget_spent().statements == second.budget_spent().statements == 1


@pytest.mark.parametrize("case", list(REFUSED))
def test_every_entry_point_refuses_identically_before_reading(case: str, adult_frame: pd.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    refusals = []
    for name, entry in {**ENTRY_POINTS, "explain": lambda c, s: c.explain(s, epsilon=1.0)}.items():  # type: ignore[dict-item]
        connection = _fresh(adult_frame)
        monkeypatch.setattr(connection._session.backend, "run", lambda sql: pytest.fail(f"{name} read data"))
        with pytest.raises(dpsql.Error) as raised:
            entry(connection, REFUSED[case])
        assert connection.budget_spent().statements == 0
        refusals.append((type(raised.value), str(raised.value)))
        connection.close()
    assert len(set(refusals)) == 1, refusals


ACCEPTED = adult_corpus(Path(__file__).resolve().parents[2] / "grammar" / "accepted")
PLAN_SECTIONS = ("cost:", "strategy:", "group:", "selection:", "split:", "counts:", "bounds:", "query:", "error:")


def _plan_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(PLAN_SECTIONS)]


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_explain_is_the_plan_execution_runs(path: Path, adult_frame: pd.DataFrame) -> None:
    """Over the whole accepted corpus: strategy, groups, budgets, costs and expected errors EXPLAIN shows
    are those of the executed statement's own explanation (both come from the same prepared request)."""
    sql = path.read_text().strip()
    if sql.upper().startswith("EXPLAIN"):
        sql = sql[len("EXPLAIN"):].strip()
    connection = _fresh(adult_frame)
    explained = connection.explain(sql, epsilon=0.7)
    executed = connection.cursor().execute(sql, epsilon=0.7).explanation
    before_outcome = executed.split("\nanswered:")[0]
    assert _plan_lines(explained) == _plan_lines(before_outcome)
    connection.close()


def test_explain_after_reuse_describes_what_execution_does(adult_connection: dpsql.Connection) -> None:
    """After GROUP BY sex, a statement counting sex and job: EXPLAIN and execution agree on the plan (the
    kept (sex) counts answer what they can; the rest is measured)."""
    adult_connection.cursor().execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=1.0)
    sql = "SELECT sex, COUNT(*), COUNT(job) FROM adult GROUP BY sex"
    explained = adult_connection.explain(sql, epsilon=1.0)
    executed = adult_connection.cursor().execute(sql, epsilon=1.0).explanation
    assert _plan_lines(explained) == _plan_lines(executed.split("\nanswered:")[0])
    assert "1 of 2 products answered from kept measurements" in explained


def test_every_statement_text_is_parsed_once(adult_connection: dpsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    original_parse, original_parse_one = sqlglot.parse, sqlglot.parse_one

    def parse(sql: str, *args: object, **kwargs: object) -> object:
        parsed.append(sql)
        return original_parse(sql, *args, **kwargs)

    def parse_one(sql: str, *args: object, **kwargs: object) -> object:
        parsed.append(sql)
        return original_parse_one(sql, *args, **kwargs)

    monkeypatch.setattr(sqlglot, "parse", parse)
    monkeypatch.setattr(sqlglot, "parse_one", parse_one)
    pipeline._bound_text.cache_clear()  # texts run by earlier tests would be served bound, parsed zero times
    cube = "SELECT sex, race, job, COUNT(*) FROM adult GROUP BY CUBE (sex, race, job)"
    cursor = adult_connection.cursor()
    cursor.execute(cube, epsilon=1.0)
    cursor.execute("EXPLAIN " + cube)
    cursor.executemany("SELECT sex, COUNT(*) FROM adult WHERE race = ? GROUP BY sex", [(0,), (1,), (2,)], epsilon=0.1)
    adult_connection.workload([SHAPES["union all"], SHAPES["unknown keys in a cube"]], epsilon=1.0)
    user_texts = [text for text in parsed if "adult" in text]
    assert len(user_texts) == 5, user_texts  # cube, EXPLAIN cube, the executemany text, two workload texts
