"""End-to-end numbers: the documented NULL/out-of-domain rule, contribution bounding, empirical noise
variance against the reported standard errors, and each bad input's exception class and message
(nothing is charged for any failure)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing


def rounded(rows: list[tuple]) -> list[tuple]:
    return [tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows]


def _exact(connection: dpsql.Connection, sql: str, epsilon: float = 0.5) -> list[tuple]:
    with dpsql.testing.noise_disabled():
        return rounded(connection.cursor().execute(sql, epsilon=epsilon).fetchall())


# -- the rule for NULLs and values outside the declared domain ---------------------------------------------


def test_null_and_out_of_domain_rows_are_dropped_in_every_declared_column() -> None:
    """One data-independent rule for every statement: a row with a NULL (where not nullable) or a value
    outside the declared domain in ANY column with a public domain is not counted, whatever the
    statement mentions, so all statements count the same rows."""
    frame = pd.DataFrame(
        {
            "sex": ["F", "M", None, "X", "F", "M", "F", "M"],
            "age": [20.0, 21.0, 20.0, 20.0, 200.0, 20.5, None, 25.0],
            "job": ["a", None, "b", "a", "zzz", None, "b", "b"],
            "note": ["x", "y", "z", "w", "v", "u", "t", None],  # unknown domain: never a reason to drop
            "income": [5, 500, 5, 5, 5, 5, 5, 1000],  # bins [0, 100), [100, 1000): 1000 is outside
            "wage": [5.0, 999.5, 5.0, 5.0, 5.0, 5.0, 5.0, 50.0],
        }
    )
    schema = {
        "columns": {
            "sex": {"categories": ["F", "M"]},
            "age": {"range": [18, 30]},
            "job": {"categories": ["a", "b"], "nullable": True},
            "note": "unknown",
            "income": {"bins": [0, 100, 1000]},
            "wage": {"bins": [0, 100, 1000]},
        }
    }
    connection = dpsql.connect(budget=dpsql.Budget(100.0), reuse=False)
    connection.register("t", frame, schema=schema)
    # rows 2 (NULL sex), 3 ('X'), 4 (age 200, job 'zzz'), 5 (age 20.5, not an integer), 6 (NULL age) and
    # 7 (income 1000, past the last bin edge) are dropped, whatever the statement mentions
    assert _exact(connection, "SELECT sex, COUNT(*) FROM t GROUP BY sex") == [("F", 1.0), ("M", 1.0)]
    assert _exact(connection, "SELECT sex, COUNT(*) FROM t WHERE age >= 18 GROUP BY sex") == [("F", 1.0), ("M", 1.0)]
    # nullable job: NULL is its own cell (last)
    assert _exact(connection, "SELECT job, COUNT(*) FROM t GROUP BY job") == [("a", 1.0), ("b", 0.0), (None, 1.0)]
    assert _exact(connection, "SELECT COUNT(job), COUNT(*) FROM t") == [(1.0, 2.0)]
    # a counted binned column (cell numbers in SQL) and a filtered one agree with the raw-value test
    assert _exact(connection, "SELECT income, COUNT(*) FROM t GROUP BY income") == [("[0, 100)", 1.0), ("[100, 1000)", 1.0)]
    assert _exact(connection, "SELECT COUNT(*) FROM t WHERE wage >= 100") == [(1.0,)]
    # IS NOT NULL on a column that is not nullable holds for every row counted (BI tools add it to filters);
    # on a nullable one it leaves out the NULL cell
    assert _exact(connection, "SELECT sex, COUNT(*) FROM t WHERE sex IS NOT NULL AND age IS NOT NULL GROUP BY sex") == [("F", 1.0), ("M", 1.0)]
    assert _exact(connection, "SELECT COUNT(*) FROM t WHERE NOT (sex IS NULL) OR sex = 'F'") == [(2.0,)]
    assert _exact(connection, "SELECT COUNT(*) FROM t WHERE job IS NOT NULL") == [(1.0,)]
    with pytest.raises(dpsql.ProgrammingError, match="IS NOT NULL holds for every row counted"):
        connection.cursor().execute("SELECT COUNT(*) FROM t WHERE sex IS NULL", epsilon=0.1)
    explanation = connection.cursor().execute("SELECT COUNT(*) FROM t WHERE sex = 'F'", epsilon=0.1).explanation
    assert "rows outside the declared domains are dropped first (docs/glossary.md#rows-per-unit)" in explanation


# -- contribution bounding ---------------------------------------------------------------------------------


def _units_frame(units: int, rows_each: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "pid": np.repeat(np.arange(units), rows_each),
            "slot": np.tile(np.arange(rows_each), units),
        }
    )


def test_bounding_keeps_at_most_k_random_rows_per_unit() -> None:
    schema = {"privacy_unit": "pid", "max_rows_per_unit": 2, "columns": {"slot": {"range": [0, 4]}}}
    connection = dpsql.connect(budget=dpsql.Budget(1000.0), reuse=False)  # every statement bounds afresh
    connection.register("t", _units_frame(units=300, rows_each=5), schema=schema)
    rows = _exact(connection, "SELECT slot, COUNT(*) FROM t GROUP BY slot")
    counts = np.array([n for _, n in rows])
    assert counts.sum() == 600  # 300 units × 2 kept rows
    # the two kept rows are random among five: each slot keeps 2/5 of its 300 rows in expectation
    assert np.all(np.abs(counts - 120) < 4 * math.sqrt(300 * 0.4 * 0.6))
    # the salt is drawn once per registered table: every statement bounds it the same way (the same rows,
    # whatever it counts), and a new registration draws another choice
    frame = _units_frame(units=300, rows_each=5)
    choices = []
    for seed in (11, 11, 12):
        with dpsql.testing.seeded(seed):
            connection.register("t", frame, schema=schema)
        by_slot = _exact(connection, "SELECT slot, COUNT(*) FROM t GROUP BY slot")
        total = _exact(connection, "SELECT COUNT(*) FROM t WHERE slot IN (0, 1, 2, 3, 4)")
        assert sum(n for _, n in by_slot) == total[0][0] == 600
        choices.append(by_slot)
    assert choices[0] == choices[1] and choices[0] != choices[2]
    # WHERE applies to the bounded rows: a filtered statement counts the kept rows that pass it
    kept = dict(by_slot)
    assert _exact(connection, "SELECT COUNT(*) FROM t WHERE slot = 4") == [(kept[4],)]
    assert _exact(connection, "SELECT slot, COUNT(*) FROM t WHERE slot >= 3 GROUP BY slot") == [(slot, kept[slot]) for slot in (3, 4)]


def test_row_level_privacy_without_unit_column() -> None:
    connection = dpsql.connect(budget=dpsql.Budget(10.0))
    connection.register("t", _units_frame(units=4, rows_each=3), schema={"columns": {"slot": {"range": [0, 2]}}})
    assert _exact(connection, "SELECT slot, COUNT(*) FROM t GROUP BY slot") == [(0, 4.0), (1, 4.0), (2, 4.0)]


# -- noise: empirical variance against the reported standard errors ------------------------------------------


def _variance_check(noise: str, cost: dict[str, float], runs: int) -> None:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"race": rng.integers(0, 5, 400), "age": rng.integers(20, 30, 400)})
    schema = {"columns": {"race": {"categories": [0, 1, 2, 3, 4]}, "age": {"range": [20, 29]}}}
    connection = dpsql.connect(budget=dpsql.Budget(1e9, 1e-6), noise=noise, reuse=False)  # fresh noise per run
    connection.register("t", frame, schema=schema)
    sql = "SELECT race, COUNT(*) FROM t WHERE age < 25 GROUP BY race"
    truth = np.array([n for _, n in _exact(connection, sql)])
    released, reported = [], None
    cursor = connection.cursor()
    with dpsql.testing.seeded(2024):
        for _ in range(runs):
            cursor.execute(sql, **cost)
            released.append([n for _, n in cursor.fetchall()])
            reported = np.array([e for _, e in cursor.errors]) ** 2
    deviations = np.array(released) - truth
    empirical = (deviations**2).mean(axis=0)
    # unbiased: each cell's mean error is within 4 standard errors of 0
    assert np.all(np.abs(deviations.mean(axis=0)) < 4 * np.sqrt(reported / runs))
    # variance: pooled over the 5 cells, the ratio empirical/reported has relative standard error about
    # sqrt((kurtosis - 1) / (5 runs)) ≤ sqrt(5 / (5 runs)); we allow 4 such standard errors
    tolerance = 4 * math.sqrt(5 / (5 * runs))
    assert abs(empirical.mean() / reported.mean() - 1) < tolerance, (empirical, reported)


def test_laplace_variance_matches_reported_errors() -> None:
    _variance_check("laplace", {"epsilon": 0.5}, runs=200)


def test_gaussian_variance_matches_reported_errors() -> None:
    _variance_check("gaussian", {"rho": 0.05}, runs=200)


# -- bad inputs: exception class, message, and nothing charged --------------------------------------------------

BAD_STATEMENTS = [
    ("SELEC sex FROM adult", {"epsilon": 0.1}, dpsql.ProgrammingError, "cannot parse"),
    ("SELECT sex, ARG_MAX(job, age) FROM adult GROUP BY sex", {"epsilon": 0.1}, dpsql.NotSupportedError, "ARG_MAX"),
    ("SELECT height, COUNT(*) FROM adult GROUP BY height", {"epsilon": 0.1}, dpsql.ProgrammingError, "unknown column 'height'"),
    ("SELECT COUNT(*) FROM adult WHERE browser = 'x'", {"epsilon": 0.1}, dpsql.NotSupportedError, "'browser' has no declared domain"),
    ("SELECT COUNT(*) FROM adult WHERE sex = 'X'", {"epsilon": 0.1}, dpsql.DataError, "outside the declared domain of 'sex'"),
    ("SELECT COUNT(*) FROM adult WHERE race IN (1, 7)", {"epsilon": 0.1}, dpsql.DataError, "outside the declared domain of 'race'"),
    ("SELECT COUNT(*) FROM adult WHERE age = 200", {"epsilon": 0.1}, dpsql.DataError, "outside the declared domain of 'age'"),
    ("SELECT COUNT(*) FROM adult WHERE age > 'old'", {"epsilon": 0.1}, dpsql.DataError, "type does not match"),
    ("SELECT COUNT(*) FROM adult WHERE sex IS NULL", {"epsilon": 0.1}, dpsql.ProgrammingError, "nullable: true"),
    ("SELECT COUNT(*) FROM adult WHERE job = NULL", {"epsilon": 0.1}, dpsql.ProgrammingError, "IS NULL"),
    ("SELECT COUNT(*) FROM adult", {"epsilon": 0.0}, dpsql.ProgrammingError, "epsilon must lie in"),
    ("SELECT COUNT(*) FROM adult", {"epsilon": -1.0}, dpsql.ProgrammingError, "epsilon must lie in"),
    ("SELECT COUNT(*) FROM adult", {"epsilon": math.nan}, dpsql.ProgrammingError, "finite"),
    ("SELECT COUNT(*) FROM adult", {}, dpsql.ProgrammingError, "pass execute\\(sql, epsilon=...\\)"),
    ("SELECT COUNT(*) FROM adult", {"epsilon": 0.1, "rho": 0.1}, dpsql.ProgrammingError, "not both"),
    ("SELECT COUNT(*) FROM adult", {"epsilon": 5000.0}, dpsql.BudgetExceededError, "more than the budget has left"),
]


@pytest.mark.parametrize(("sql", "cost", "error", "message"), BAD_STATEMENTS)
def test_bad_input_raises_its_class_and_charges_nothing(
    adult_connection: dpsql.Connection, sql: str, cost: dict, error: type, message: str
) -> None:
    before = adult_connection.budget_spent()
    with pytest.raises(error, match=message):
        adult_connection.cursor().execute(sql, **cost)
    assert adult_connection.budget_spent() == before


def test_bad_connection_options() -> None:
    with pytest.raises(dpsql.ProgrammingError, match="noise must be one of"):
        dpsql.connect(budget=dpsql.Budget(1.0), noise="uniform")
    with pytest.raises(dpsql.ProgrammingError, match="needs a budget"):
        dpsql.connect()
    with pytest.raises(dpsql.ProgrammingError, match="dpsql.Budget"):
        dpsql.connect(budget="1.0")  # type: ignore[arg-type]


def test_default_epsilon_is_the_documented_default_cost() -> None:
    connection = dpsql.connect(budget=dpsql.Budget(1.0), default_epsilon=0.25)
    connection.register("t", pd.DataFrame({"x": [1, 2]}), schema={"columns": {"x": {"range": [1, 2]}}})
    connection.cursor().execute("SELECT x, COUNT(*) FROM t GROUP BY x")
    assert connection.budget_remaining() == pytest.approx(0.75)


def test_statement_with_no_possible_rows_reads_nothing_and_costs_nothing(adult_connection: dpsql.Connection) -> None:
    adult_connection._session.backend.run = None  # type: ignore[assignment]  # any read would fail
    cursor = adult_connection.cursor().execute("SELECT sex, COUNT(*) FROM adult WHERE age > 100 GROUP BY sex", epsilon=1.0)
    assert cursor.fetchall() == [] and cursor.errors == []  # every cell is excluded by the WHERE clause: no row
    assert adult_connection.cursor().execute("SELECT COUNT(*) FROM adult WHERE age > 100", epsilon=1.0).fetchall() == [(0.0,)]
    assert adult_connection.budget_spent().statements == 0


def test_issue_example_end_to_end(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    cursor.execute(
        "SELECT sex, race, COUNT(*) AS n FROM adult WHERE age BETWEEN 20 AND 40 GROUP BY sex, race", epsilon=0.5
    )
    rows = cursor.fetchall()
    assert [(r[0], r[1]) for r in rows] == [(s, r) for s in ("F", "M") for r in range(5)]
    assert all(isinstance(r[2], float) for r in rows)
    assert all(e[0] is None and e[1] is None and e[2] > 0 for e in cursor.errors)
    assert adult_connection.budget_remaining() == pytest.approx(999.5)


def test_one_statement_computes_several_marginals_with_grouping_sets(
    adult_connection: dpsql.Connection, adult_frame: pd.DataFrame
) -> None:
    from dpsql.sql.bounded import BoundedAggregation

    table = adult_connection._session.table("adult")
    columns = {name: table.schema.column(name) for name in ("sex", "race", "income")}
    aggregation = BoundedAggregation(
        table=table.relation,
        columns=columns,
        column_types=table.column_types,
        marginals=(("sex", "race"), ("income",), ()),
        privacy_unit="person_id",
        max_rows_per_unit=3,  # the fixture never exceeds it: bounding keeps every row
        salt=1,
        row_columns=tuple(table.column_types),
    )
    sql = aggregation.statement().sql(dialect="duckdb")
    assert sql.count("GROUPING SETS") == 1 and sql.count("ROW_NUMBER()") == 1  # one statement, one ranking window
    marginals = aggregation.marginal_arrays(adult_connection._session.backend.run(sql))
    expected_sex_race = pd.crosstab(adult_frame["sex"], adult_frame["race"]).reindex(index=["F", "M"], columns=range(5), fill_value=0)
    assert (marginals[("sex", "race")] == expected_sex_race.to_numpy()).all()
    bins = pd.cut(adult_frame["income"], [0, 10000, 50000, 100000, 1000000], right=False)
    assert (marginals[("income",)] == bins.value_counts(sort=False).to_numpy()).all()
    assert int(marginals[()]) == len(adult_frame)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM t WHERE age BETWEEN 20 AND 30",
        "SELECT CASE WHEN age < 50 THEN 'young' ELSE 'old' END AS band, COUNT(*) FROM t GROUP BY band",
        "SELECT MEDIAN(age) FROM t",
    ],
)
def test_a_bounds_only_column_outside_sums_names_the_range_to_declare(sql: str) -> None:
    """A column declared with ``bounds`` only has no domain of cells; the refusal names the range its bounds imply."""
    frame = pd.DataFrame({"pid": [1, 2, 3], "age": [20, 35, 71]})
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1.0))
    connection.register("t", frame, schema={"privacy_unit": "pid", "columns": {"age": {"bounds": [0, 100]}}})
    with pytest.raises(dpsql.NotSupportedError, match=r"bounds \[0, 100\] serve SUM/AVG/VARIANCE/STDDEV only; declare range: \[0, 100\]"):
        connection.cursor().execute(sql, epsilon=0.5)
    assert connection.budget_spent().epsilon == 0.0
