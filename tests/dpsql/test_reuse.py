"""Re-use of released measurements: GLS over the kept ones equals the planner's own GLS; a statement the
kept measurements answer at least as accurately as a fresh measurement at its cost is free (never
refused for lack of budget) and agrees with earlier releases; otherwise what is missing is measured,
charged and combined; statements with the same WHERE share what is kept."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
from planner import Domain, Plan, Privacy, Workload, plan
from planner.budget import Sensitivity
from planner.strategies.marginals import marginals_candidate
from planner.store import MeasurementStore
from planner.strategies.residual import CoefficientCandidate, residual_candidate

CUBE = "SELECT sex, race, GROUPING(sex, race) AS g, COUNT(*) FROM adult GROUP BY CUBE (sex, race)"


def _marginals(x: np.ndarray, domain: Domain, wanted: tuple[tuple[str, ...], ...]) -> dict[tuple[str, ...], np.ndarray]:
    return {m: x.sum(axis=tuple(i for i, a in enumerate(domain.attributes) if a not in m)) for m in wanted}


DOMAIN = Domain({"a": 9, "b": 7, "c": 5, "d": 6})
WORKLOAD = Workload.marginals(DOMAIN, [("a", "b"), ("b", "c"), ("a",), ("c", "d")])
MARGINALS = marginals_candidate(WORKLOAD, Privacy.laplace(1.0), Sensitivity(1), [("a", "b"), ("b", "c"), ("c", "d"), ("a",)])
RESIDUAL = residual_candidate(WORKLOAD, Privacy.zcdp(0.5), Sensitivity(1))


@pytest.mark.parametrize("candidate", [MARGINALS, RESIDUAL], ids=["marginals", "residual"])
def test_store_reproduces_the_planners_gls(candidate: CoefficientCandidate) -> None:
    domain, workload = DOMAIN, WORKLOAD
    x = np.random.default_rng(1).integers(0, 50, size=domain.sizes)
    chosen = Plan(candidate, ())
    measurement = chosen.measure(_marginals(x, domain, chosen.required_marginals()), rng=np.random.default_rng(3))
    expected = chosen.answer(measurement)
    store = MeasurementStore()
    estimates = chosen.kept_estimates(measurement)
    assert estimates is not None
    store.record("rows", estimates)
    assert store.covered("rows", workload) == (True,) * 4
    found = store.answer("rows", workload, range(4))
    for index in range(4):
        assert np.allclose(found[index][0], expected.values[index], atol=1e-9)
        assert np.allclose(found[index][1], expected.variances[index], rtol=1e-12)
    # a marginal the strategy never measured whole, but whose residuals it did: (b) and (a, c) are not all covered
    other = Workload.marginals(Domain({"d": 6, "c": 5, "a": 9}), [("c",), ("a", "c"), ()])
    assert store.covered("rows", other) == (True, False, True)
    assert not store.covered("other rows", other)[0]
    # an attribute of another size is another domain: nothing kept answers it
    resized = Workload.marginals(Domain({"c": 4}), [("c",)])
    assert store.covered("rows", resized) == (False,)


def test_two_measurements_combine_by_inverse_variance() -> None:
    domain = Domain({"a": 4, "b": 3})
    x = np.arange(12).reshape(4, 3)
    workload = Workload.marginals(domain, [("a", "b")])
    store = MeasurementStore()
    values = []
    for epsilon, seed in ((1.0, 1), (2.0, 2)):
        chosen = plan(workload, Privacy.laplace(epsilon))
        measurement = chosen.measure(_marginals(x, domain, chosen.required_marginals()), rng=np.random.default_rng(seed))
        values.append((chosen.answer(measurement).values[0], chosen.query_variances()[0]))
        store.record("rows", chosen.kept_estimates(measurement))
    (v1, s1), (v2, s2) = values
    combined_values, combined_variances = store.answer("rows", workload, [0])[0]
    assert np.allclose(combined_variances, 1 / (1 / s1 + 1 / s2))
    assert np.allclose(combined_values, (v1 / s1 + v2 / s2) / (1 / s1 + 1 / s2))


@pytest.fixture()
def reusing(adult_frame: pd.DataFrame, adult_schema: dict) -> Iterator[dpsql.Connection]:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0), reuse=True)
    connection.register("adult", adult_frame, schema=adult_schema)
    yield connection
    connection.close()


def test_statement_in_the_row_space_is_free_and_consistent(reusing: dpsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    with dpsql.testing.seeded(3):
        cube = {(r[0], r[1], r[2]): (r[3], e[3]) for r, e in zip(*_rows(reusing, CUBE))}
    spent = reusing.budget_spent()
    monkeypatch.setattr(reusing._session.backend, "run", lambda sql: pytest.fail("re-use read data"))
    cursor = reusing.cursor()
    for sql in (  # every one counts the rows valid in sex and race, as the cube did; at ε = 0.25 a fresh
        # measurement would be less accurate than what the ε = 1 cube implies
        "SELECT sex, COUNT(*) FROM adult WHERE race IN (0, 1, 2, 3, 4) GROUP BY sex",
        "SELECT race, sex, COUNT(*) FROM adult GROUP BY race, sex",
        "SELECT sex, race, COUNT(*) FROM adult GROUP BY ROLLUP (sex, race)",
    ):
        cursor.execute(sql, epsilon=0.25)
        for row, error in zip(cursor.fetchall(), cursor.errors):
            keys = dict(zip([d[0] for d in cursor.description], row))
            sex, race = keys.get("sex"), keys.get("race")
            mask = (0 if sex is not None else 2) + (0 if race is not None else 1)
            value, standard_error = cube[(sex, race, mask)]
            assert row[-1] == pytest.approx(value, abs=1e-7) and error[-1] == pytest.approx(standard_error, rel=1e-9)
    assert reusing.budget_spent() == spent
    rows = reusing.cursor().execute("EXPLAIN SELECT race, sex, COUNT(*) FROM adult GROUP BY sex, race", epsilon=0.25).fetchall()
    assert ("cost", "epsilon", 0.0, "answered from kept measurements by GLS: nothing is charged") in rows


def _rows(connection: dpsql.Connection, sql: str, epsilon: float = 1.0) -> tuple[list[tuple], list[tuple]]:
    cursor = connection.cursor().execute(sql, epsilon=epsilon)
    return cursor.fetchall(), cursor.errors


def test_a_statement_over_other_columns_counts_the_same_rows_and_is_free(adult_frame: pd.DataFrame, adult_schema: dict) -> None:
    """Rows outside a declared domain are dropped for every statement, so a total asked after a CUBE
    counts the CUBE's rows and is answered from it: the classic re-use, GROUP BY ⊂ CUBE."""
    frame = adult_frame.copy()
    frame.loc[frame["person_id"] <= 50, "race"] = 9  # outside race's domain: these rows are never counted
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0))
    connection.register("adult", frame, schema=adult_schema)
    with dpsql.testing.noise_disabled():
        with_race = _rows(connection, "SELECT sex, race, COUNT(*) FROM adult GROUP BY CUBE (sex, race)")[0]
        by_sex = _rows(connection, "SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=0.25)[0]
        total = _rows(connection, "SELECT COUNT(*) FROM adult", epsilon=0.25)[0]
    assert connection.budget_spent().epsilon == pytest.approx(1.0)  # only the CUBE was charged
    total_with_race = next(r[2] for r in with_race if r[0] is None and r[1] is None)
    assert total[0][0] == pytest.approx(total_with_race)
    assert total_with_race == pytest.approx((frame["race"] != 9).sum())  # clean fixture: bounding drops nothing
    assert [r[1] for r in by_sex] == pytest.approx([r[2] for r in with_race if r[0] is not None and r[1] is None])


def test_only_what_is_missing_is_measured_and_combined(reusing: dpsql.Connection) -> None:
    # a WHERE true on every counted row (job's whole domain): a sex marginal the batch can combine with
    sex_of_job_rows = "SELECT sex, COUNT(*) FROM adult WHERE job IN ('clerk', 'engineer', 'nurse', 'teacher') OR job IS NULL GROUP BY sex"
    _rows(reusing, sex_of_job_rows)
    statements = ["SELECT sex, COUNT(*) FROM adult GROUP BY sex", "SELECT job, COUNT(*) FROM adult GROUP BY job"]
    explained = reusing.workload(statements, epsilon=0.5, explain=True)[0].rows
    (cost,) = [row for row in explained if row[0] == "cost"]
    assert cost[2] == 0.5 and "1 of 2 products answered from kept" in cost[3]
    kept_error = _rows(reusing, sex_of_job_rows)[1][0][1]
    before = reusing.budget_spent()
    results = reusing.workload(statements, epsilon=0.5)
    assert reusing.budget_spent().epsilon == pytest.approx(before.epsilon + 0.5)
    # the new measurement covers (job) and the total: the sex counts' total part gets more precise
    assert results[0].errors[0][1] < kept_error
    assert sum(r[1] for r in results[0].rows) == pytest.approx(sum(r[1] for r in results[1].rows), rel=1e-8)  # 10 digits each


def test_a_repeated_statement_is_charged_once_by_default(adult_frame: pd.DataFrame, adult_schema: dict) -> None:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0))
    connection.register("adult", adult_frame, schema=adult_schema)
    sql = "SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race"
    first = _rows(connection, sql)
    spent = connection.budget_spent()
    assert spent.epsilon == pytest.approx(1.0)
    second = _rows(connection, sql)
    assert connection.budget_spent() == spent
    assert second == first and len(first[0]) == 10
    # reuse=False opts out: fresh noise at a fresh charge
    fresh = dpsql.connect(budget=dpsql.Budget(epsilon=10.0), reuse=False)
    fresh.register("adult", adult_frame, schema=adult_schema)
    once, twice = _rows(fresh, sql), _rows(fresh, sql)
    assert fresh.budget_spent().epsilon == pytest.approx(2.0)
    assert once[0] != twice[0] and once[1] == twice[1]


def test_statements_with_the_same_where_share_kept_measurements(reusing: dpsql.Connection) -> None:
    where = "SELECT sex, COUNT(*) FROM adult WHERE race = 0 GROUP BY CUBE (sex)"
    with dpsql.testing.noise_disabled():
        filtered = _rows(reusing, where)[0]
        again = _rows(reusing, "SELECT sex, COUNT(*) FROM adult WHERE race = 0 GROUP BY sex")[0]  # same WHERE: free
        everything = _rows(reusing, "SELECT sex, COUNT(*) FROM adult GROUP BY sex")[0]  # other rows: measured
    assert [r[1] for r in again] == pytest.approx([r[1] for r in filtered[:2]])
    assert filtered[-1][1] < sum(r[1] for r in everything) - 100
    assert reusing.budget_spent().epsilon == pytest.approx(2.0)


def test_a_statement_is_answered_at_least_as_accurately_as_asked(reusing: dpsql.Connection) -> None:
    """Kept answers at a worse accuracy than a fresh measurement at the asked cost are not returned for
    free: the statement is measured, charged and combined; once kept answers are good enough, it is free."""
    sql = "SELECT sex, COUNT(*) FROM adult GROUP BY sex"
    cursor = reusing.cursor()
    coarse = cursor.execute(sql, epsilon=0.001).errors[0][1]
    fine = cursor.execute(sql, epsilon=1.0)
    fresh_error = 3 * np.sqrt(2) / 1.0  # one count of a 1-DP identity plan, 3 rows per unit: Laplace b = 3
    assert fine.errors[0][1] <= fresh_error * 1.0001 and fine.errors[0][1] < coarse / 100
    assert "answered: combined" in fine.explanation and reusing.budget_spent().epsilon == pytest.approx(1.001)
    cursor.execute(sql, epsilon=0.5)  # the kept answers beat a fresh 0.5 measurement: free
    assert "answered: free" in cursor.explanation and reusing.budget_spent().epsilon == pytest.approx(1.001)


def test_a_free_answer_is_never_refused_for_lack_of_budget(reusing: dpsql.Connection) -> None:
    sql = "SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race"
    first = _rows(reusing, sql)
    reusing.cursor().execute("SELECT job, COUNT(*) FROM adult GROUP BY job", epsilon=8.99)  # almost nothing left
    assert reusing.budget_remaining() < 0.02
    cursor = reusing.cursor().execute(sql, epsilon=1.0)  # asks ε = 1, more than is left: free, so not refused
    assert "answered: free" in cursor.explanation
    assert [r[2] for r in cursor.fetchall()] == pytest.approx([r[2] for r in first[0]], abs=5)  # GLS with the job counts' total
    with pytest.raises(dpsql.BudgetExceededError):
        reusing.cursor().execute("SELECT age, COUNT(*) FROM adult GROUP BY age", epsilon=1.0)


def test_reregistering_a_table_forgets_its_measurements(reusing: dpsql.Connection, adult_frame: pd.DataFrame, adult_schema: dict) -> None:
    _rows(reusing, "SELECT sex, COUNT(*) FROM adult GROUP BY sex")
    reusing.register("adult", adult_frame.iloc[:100], schema=adult_schema)
    with dpsql.testing.noise_disabled():
        rows = _rows(reusing, "SELECT sex, COUNT(*) FROM adult GROUP BY sex")[0]
    assert sum(r[1] for r in rows) == pytest.approx(100)
    assert reusing.budget_spent().epsilon == pytest.approx(2.0)
