"""Re-use of released measurements: GLS over the kept ones equals the planner's own GLS, statements in
their row space cost nothing and agree with earlier releases, the rest is measured and combined."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
from dpsql.reuse import MeasurementStore
from planner import Domain, Plan, Privacy, Workload, plan
from planner.budget import Sensitivity
from planner.strategies.marginals import marginals_candidate
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
    store, columns = MeasurementStore(), domain.attributes
    assert store.record("t", columns, chosen, measurement)
    assert store.covered("t", columns, workload) == (True,) * 4
    found = store.answers("t", columns, workload)
    for mine, theirs in zip(found.values, expected.values):
        assert np.allclose(mine, theirs, atol=1e-9)
    for mine, theirs in zip(found.variances, expected.variances):
        assert np.allclose(mine, theirs, rtol=1e-12)
    # a marginal the strategy never measured whole, but whose residuals it did: (b) and (a, c) are not all covered
    other = Workload.marginals(Domain({"d": 6, "c": 5, "a": 9}), [("c",), ("a", "c"), ()])
    assert store.covered("t", columns, other) == (True, False, True)
    assert not store.covered("elsewhere", columns, other)[0]
    # the same table counted over other columns holds other rows (out-of-domain rows drop per column)
    assert not store.covered("t", ("a", "c", "d"), other)[0]


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
        store.record("t", domain.attributes, chosen, measurement)
    (v1, s1), (v2, s2) = values
    combined = store.answers("t", domain.attributes, workload)
    assert np.allclose(combined.variances[0], 1 / (1 / s1 + 1 / s2))
    assert np.allclose(combined.values[0], (v1 / s1 + v2 / s2) / (1 / s1 + 1 / s2))


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
    monkeypatch.setattr(reusing._backend, "run", lambda sql: pytest.fail("re-use read data"))
    cursor = reusing.cursor()
    for sql in (  # every one counts the rows valid in sex and race, as the cube did
        "SELECT sex, COUNT(*) FROM adult WHERE race IN (0, 1, 2, 3, 4) GROUP BY sex",
        "SELECT race, sex, COUNT(*) FROM adult GROUP BY race, sex",
        "SELECT sex, race, COUNT(*) FROM adult GROUP BY ROLLUP (sex, race)",
    ):
        cursor.execute(sql, epsilon=1.0)
        for row, error in zip(cursor.fetchall(), cursor.errors):
            keys = dict(zip([d[0] for d in cursor.description], row))
            sex, race = keys.get("sex"), keys.get("race")
            mask = (0 if sex is not None else 2) + (0 if race is not None else 1)
            value, standard_error = cube[(sex, race, mask)]
            assert row[-1] == pytest.approx(value, abs=1e-7) and error[-1] == pytest.approx(standard_error, rel=1e-9)
    assert reusing.budget_spent() == spent
    rows = reusing.cursor().execute("EXPLAIN SELECT race, sex, COUNT(*) FROM adult GROUP BY sex, race", epsilon=1.0).fetchall()
    assert ("cost", "epsilon", 0.0, "answered from kept measurements by GLS: nothing is charged") in rows


def _rows(connection: dpsql.Connection, sql: str) -> tuple[list[tuple], list[tuple]]:
    cursor = connection.cursor().execute(sql, epsilon=1.0)
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
        by_sex = _rows(connection, "SELECT sex, COUNT(*) FROM adult GROUP BY sex")[0]
        total = _rows(connection, "SELECT COUNT(*) FROM adult")[0]
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
    assert explained[2][0] == "cost" and explained[2][2] == 0.5 and "1 of 2 products answered from kept" in explained[2][3]
    kept_error = _rows(reusing, sex_of_job_rows)[1][0][1]
    before = reusing.budget_spent()
    results = reusing.workload(statements, epsilon=0.5)
    assert reusing.budget_spent().epsilon == pytest.approx(before.epsilon + 0.5)
    # the new measurement covers (job) and the total: the sex counts' total part gets more precise
    assert results[0].errors[0][1] < kept_error
    assert sum(r[1] for r in results[0].rows) == pytest.approx(sum(r[1] for r in results[1].rows), abs=1e-7)


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


def test_where_filters_are_not_kept(reusing: dpsql.Connection) -> None:
    with dpsql.testing.noise_disabled():
        filtered = _rows(reusing, "SELECT sex, COUNT(*) FROM adult WHERE race = 0 GROUP BY CUBE (sex)")[0]
        assert reusing._measurements.measurement_count("adult", ("sex", "race")) == 0  # a marginal of the rows WHERE keeps
        everything = _rows(reusing, "SELECT sex, COUNT(*) FROM adult GROUP BY sex")[0]
    assert filtered[-1][1] < sum(r[1] for r in everything) - 100
    assert reusing.budget_spent().epsilon == pytest.approx(2.0)


def test_reregistering_a_table_forgets_its_measurements(reusing: dpsql.Connection, adult_frame: pd.DataFrame, adult_schema: dict) -> None:
    _rows(reusing, "SELECT sex, COUNT(*) FROM adult GROUP BY sex")
    reusing.register("adult", adult_frame.iloc[:100], schema=adult_schema)
    with dpsql.testing.noise_disabled():
        rows = _rows(reusing, "SELECT sex, COUNT(*) FROM adult GROUP BY sex")[0]
    assert sum(r[1] for r in rows) == pytest.approx(100)
    assert reusing.budget_spent().epsilon == pytest.approx(2.0)
