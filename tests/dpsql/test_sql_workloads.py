"""GROUPING SETS / CUBE / ROLLUP / UNION ALL / ranges and batches: expansion, DuckDB-equal noise-free
answers (same rows, NULLs and GROUPING() values), one pass over the data, one charge per batch,
consistency of noisy CUBE output, error bars, weights and bad inputs."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot

import dpsql
import dpsql.testing
from conftest import make_adult
from pipeline_helpers import prepare, release
from dpsql.sql.grouping import Constant, expand_group_by
from dpsql.sql.statement import OrderKey, parse_statement

GRAMMAR = Path(__file__).resolve().parents[2] / "grammar"
ACCEPTED = sorted((GRAMMAR / "accepted" / "workloads").glob("*.sql"))
REJECTED = sorted((GRAMMAR / "rejected" / "workloads").glob("*.sql"))
EXPECT = re.compile(r"^-- expect: (\w+) (.+)$")


def _sets(group_by: str) -> list[tuple[str, ...]]:
    return expand_group_by(sqlglot.parse_one(f"SELECT COUNT(*) FROM t GROUP BY {group_by}", read="duckdb").args["group"])


# --------------------------------------------------------------------------------------------------
# Expansion (standard SQL; DuckDB's own order, duplicates kept).
# --------------------------------------------------------------------------------------------------


def test_expansion_of_each_form() -> None:
    assert _sets("CUBE (a, b)") == [("a", "b"), ("a",), ("b",), ()]
    assert _sets("ROLLUP (a, b, c)") == [("a", "b", "c"), ("a", "b"), ("a",), ()]
    assert _sets("GROUPING SETS ((a), (a, b), ())") == [("a",), ("a", "b"), ()]
    assert _sets("a, b") == [("a", "b")]
    assert _sets("ROLLUP ((a, b), c)") == [("a", "b", "c"), ("a", "b"), ()]
    assert _sets("CUBE ((a, b))") == [("a", "b"), ()]


def test_expansion_of_combined_and_nested_forms() -> None:
    assert _sets("a, CUBE (b), ROLLUP (c)") == [("a", "b", "c"), ("a", "b"), ("a", "c"), ("a",)]
    assert _sets("GROUPING SETS (a, CUBE (a, b), ROLLUP (b))") == [("a",), ("a", "b"), ("a",), ("b",), (), ("b",), ()]
    assert _sets("a, CUBE (a, b)") == [("a", "b"), ("a",), ("a", "b"), ("a",)]  # duplicates kept, like DuckDB


def test_expansion_matches_duckdb_grouping_ids() -> None:
    """The multiset of grouping sets equals DuckDB's: one output row per set on a one-row table."""
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t AS SELECT 1 AS a, 2 AS b, 3 AS c")
    for group_by in ("CUBE (a, b, c)", "a, CUBE (b), ROLLUP (c)", "GROUPING SETS (a, CUBE (a, b), ROLLUP (b))", "ROLLUP ((a, b), c)"):
        columns = sorted({c for s in _sets(group_by) for c in s})
        found = connection.execute(f"SELECT GROUPING({', '.join(columns)}) FROM t GROUP BY {group_by}").fetchall()
        mask = lambda s: sum(1 << (len(columns) - 1 - i) for i, c in enumerate(columns) if c not in s)  # noqa: E731
        assert Counter(r[0] for r in found) == Counter(mask(s) for s in _sets(group_by)), group_by
    connection.close()


def test_branch_layout_fills_nulls_and_grouping_masks() -> None:
    split = parse_statement("SELECT a, b, GROUPING(b, a) AS g, COUNT(*) AS n FROM t GROUP BY CUBE (a, b) ORDER BY g DESC, 1 LIMIT 5 OFFSET 2")
    assert split.names == ("a", "b", "g", "n")
    assert [b.layout for b in split.branches] == [
        (0, 1, Constant(0), 2),
        (0, Constant(None), Constant(2), 1),
        (Constant(None), 0, Constant(1), 1),
        (Constant(None), Constant(None), Constant(3), 0),
    ]
    assert split.order_by == (OrderKey(2, True), OrderKey(0, False)) and (split.limit, split.offset) == (5, 2)
    assert split.branches[3].query.group_by == () and split.branches[0].query.group_by == ("a", "b")


# --------------------------------------------------------------------------------------------------
# Noise-free answers equal DuckDB's.
# --------------------------------------------------------------------------------------------------


def _normal(value: object) -> object:
    if isinstance(value, float):
        assert abs(value - round(value)) < 1e-8 * max(1.0, abs(value)), value  # round-off of GLS / kept combinations
        return int(round(value))
    return value


def _duckdb_rows(sql: str, frame: pd.DataFrame) -> list[tuple]:
    tree = sqlglot.parse_one(sql, read="duckdb")
    for arg in ("order", "limit", "offset"):
        tree.set(arg, None)
    connection = duckdb.connect()
    connection.register("adult", frame)
    rows = connection.execute(tree.sql(dialect="duckdb")).fetchall()
    connection.close()
    return rows


def _without_zero_counts(rows: list[tuple], counts: list[int]) -> Counter:
    return Counter(tuple(_normal(v) for v in row) for row in rows if any(_normal(row[p]) != 0 for p in counts))


def test_corpus_is_there() -> None:
    assert len(ACCEPTED) >= 12 and len(REJECTED) >= 10
    grammar = (GRAMMAR / "dpsql.ebnf").read_text()
    assert "CUBE" in grammar and "GROUPING SETS" in grammar and "UNION" in grammar and "EXPLAIN" in grammar


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: p.stem)
def test_noise_free_answers_equal_duckdb(path: Path, adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    sql = path.read_text()
    split = parse_statement(sql)
    cursor = adult_connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute(sql, epsilon=1.0)
    rows, errors = cursor.fetchall(), cursor.errors
    assert [d[0] for d in cursor.description] == list(split.names)
    counts = [i for i, e in enumerate(errors[0]) if e is not None]
    grouping = [i for i in range(len(split.names)) if all(isinstance(b.layout[i], Constant) and b.layout[i].value is not None for b in split.branches)]
    for row, error in zip(rows, errors):
        assert all(error[p] is None for p in range(len(row)) if p not in counts)
        assert all(error[p] > 0 for p in counts)
        assert all(isinstance(row[p], int) for p in grouping)
    if split.limit is None and not split.offset:
        assert _without_zero_counts(rows, counts) == _without_zero_counts(_duckdb_rows(sql, adult_frame), counts)
        assert len(rows) >= sum(1 for _ in split.branches)
    else:
        full = adult_connection.cursor()
        with dpsql.testing.noise_disabled():
            full.execute(re.sub(r"ORDER BY.*$", "", sql.strip()), epsilon=1.0)
        ordered = sorted(full.fetchall(), key=lambda r: [(r[c] is None, r[c]) if not d else (r[c] is not None, r[c]) for c, d in ((k.item, k.descending) for k in split.order_by)], reverse=False)
        assert len(rows) == min(split.limit or len(ordered), len(ordered) - split.offset)
        for column, descending in ((k.item, k.descending) for k in split.order_by[:1]):
            values = [r[column] for r in rows]
            assert values == sorted(values, reverse=descending)
        assert {_normal(r[counts[0]]) for r in rows} <= {_normal(r[counts[0]]) for r in ordered}


def test_issue_cube_rollup_and_grouping_sets_shapes(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute("SELECT sex, race, job, COUNT(*) FROM adult GROUP BY CUBE (sex, race, job)", epsilon=1.0)
    assert cursor.rowcount == (2 + 1) * (5 + 1) * (5 + 1)  # every cell of every subset, job has a NULL cell
    with dpsql.testing.noise_disabled():
        cursor.execute("SELECT age, COUNT(*) FROM adult GROUP BY ROLLUP (age)", epsilon=1.0)
    rows = cursor.fetchall()
    assert len(rows) == 74 + 1 and rows[-1][0] is None
    assert abs(rows[-1][1] - sum(r[1] for r in rows[:-1])) < 1e-6
    assert cursor.description[0][6] is True  # rolled-up column: null_ok


# --------------------------------------------------------------------------------------------------
# One pass, one charge, consistency, error bars.
# --------------------------------------------------------------------------------------------------


def test_one_backend_statement_and_one_charge_per_batch(adult_connection: dpsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    statements: list[str] = []
    original = adult_connection._session.backend.run
    monkeypatch.setattr(adult_connection._session.backend, "run", lambda sql: statements.append(sql) or original(sql))
    before = adult_connection.budget_spent()
    results = adult_connection.workload(
        [
            "SELECT sex, race, COUNT(*) FROM adult GROUP BY CUBE (sex, race)",
            "SELECT job, COUNT(*) FROM adult GROUP BY job",
            "SELECT COUNT(*) FROM adult WHERE age BETWEEN 25 AND 34",
        ],
        epsilon=0.7,
    )
    assert len(statements) == 1 and "GROUPING SETS" in statements[0].upper()
    spent = adult_connection.budget_spent()
    assert spent.statements == before.statements + 1
    assert spent.epsilon == pytest.approx(before.epsilon + 0.7)
    assert [len(r.rows) for r in results] == [3 * 6, 5, 1]


@pytest.fixture()
def fresh_connection(adult_frame: pd.DataFrame, adult_schema: dict) -> Iterator[dpsql.Connection]:
    """``adult`` on a connection that measures every release afresh (reuse=False): fresh noise each time."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1000.0), reuse=False)
    connection.register("adult", adult_frame, schema=adult_schema)
    yield connection
    connection.close()


def test_noisy_cube_is_consistent(fresh_connection: dpsql.Connection) -> None:
    with dpsql.testing.seeded(11):
        results = fresh_connection.workload(
            [
                "SELECT sex, race, GROUPING(sex, race) AS g, COUNT(*) AS n FROM adult GROUP BY CUBE (sex, race)",
                "SELECT race, COUNT(*) AS n FROM adult GROUP BY race",
            ],
            epsilon=0.5,
        )
    cube = {(r[0], r[1], r[2]): r[3] for r in results[0].rows}
    cells = {k: v for k, v in cube.items() if k[2] == 0}
    with dpsql.testing.noise_disabled():
        exact = fresh_connection.workload(["SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race"], epsilon=0.5)
    assert sum(abs(a[2] - b) for a, b in zip(exact[0].rows, cells.values())) > 5  # noise was added
    for sex in ("F", "M"):
        assert cube[(sex, None, 1)] == pytest.approx(sum(v for k, v in cells.items() if k[0] == sex), abs=1e-7)
    for race in range(5):
        assert cube[(None, race, 2)] == pytest.approx(sum(v for k, v in cells.items() if k[1] == race), abs=1e-7)
        assert dict(results[1].rows)[race] == pytest.approx(cube[(None, race, 2)], abs=1e-7)  # same cell, same number
    assert cube[(None, None, 3)] == pytest.approx(sum(cells.values()), abs=1e-7)


def test_errors_are_the_plans_standard_errors_with_correlations(adult_connection: dpsql.Connection) -> None:
    sql = "SELECT sex, race, COUNT(*) FROM adult GROUP BY CUBE (sex, race)"
    prepared = prepare(adult_connection, [sql], epsilon=1.0)
    variances = prepared.plan.query_variances()
    cursor = adult_connection.cursor().execute(sql, epsilon=1.0)
    errors = [e[2] for e in cursor.errors]
    expected = np.concatenate([np.sqrt(v) for v in variances])
    assert np.allclose(errors, expected, rtol=1e-12)  # rows in grouping-set order, cells in domain order
    # brute force over the 10-cell domain: GLS covariance W (Sᵀ Σ⁻¹ S)⁺ Wᵀ of the measured strategy
    candidate = prepared.plan.candidate
    strategy, _, noise_variances = candidate.dense_strategy()
    workload = candidate.dense_workload()
    covariance = workload @ np.linalg.pinv(strategy.T @ (strategy / noise_variances[:, None])) @ workload.T
    assert np.allclose(np.array(errors) ** 2, np.diag(covariance), rtol=1e-9)
    # the released values are correlated (a cell and the grand total share noise): errors come from the
    # joint GLS covariance, not from treating each grouping set as an independent query
    assert covariance[0, -1] > 0.05 * np.sqrt(covariance[0, 0] * covariance[-1, -1])
    intervals = cursor.confidence_interval(0.95)
    row, error, interval = cursor.fetchall()[0], errors[0], intervals[0]
    assert interval[0] is None and interval[1] is None
    assert interval[2] == pytest.approx((row[2] - 1.959963984540054 * error, row[2] + 1.959963984540054 * error))
    with pytest.raises(dpsql.ProgrammingError, match="between 0 and 1"):
        cursor.confidence_interval(1.5)


def test_empirical_variance_of_a_cube_subtotal_matches_its_error(fresh_connection: dpsql.Connection) -> None:
    """Over 300 seeded releases the sample variance of the grand total is within the χ² 99.9% band."""
    sql = "SELECT sex, race, COUNT(*) FROM adult GROUP BY CUBE (sex, race)"
    prepared = prepare(fresh_connection, [sql], epsilon=1.0)
    with dpsql.testing.seeded(5):
        totals = []
        for _ in range(300):
            rows = release(fresh_connection, prepared)[0].rows
            totals.append(rows[-1][2])
    expected = float(prepared.plan.query_variances()[-1][0])
    ratio = np.var(totals, ddof=1) / expected
    # Laplace-type noise has kurtosis > 3: a generous band, still far from a 2x error
    assert 0.7 < ratio < 1.35, ratio
    assert abs(np.mean(totals) - 2427) < 4 * math.sqrt(expected / 300)


def test_statement_weights_shift_accuracy(adult_connection: dpsql.Connection) -> None:
    statements = ["SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race", "SELECT job, COUNT(*) FROM adult GROUP BY job"]
    even = prepare(adult_connection, statements, epsilon=1.0)
    favour_job = prepare(adult_connection, statements, epsilon=1.0, weights=[1.0, 10.0])
    job_variance = lambda p: float(p.plan.query_variances()[1].mean())  # noqa: E731
    assert job_variance(favour_job) < 0.8 * job_variance(even)
    with pytest.raises(dpsql.ProgrammingError, match="weight"):
        prepare(adult_connection, statements, epsilon=1.0, weights=[1.0, -1.0])
    with pytest.raises(dpsql.ProgrammingError, match="one positive number per statement"):
        prepare(adult_connection, statements, epsilon=1.0, weights=[1.0])


def test_ranges_of_a_batch_become_predicate_blocks(adult_connection: dpsql.Connection) -> None:
    """Statements with different WHERE ranges share one measurement: each keeps its range as a mask."""
    statements = [
        "SELECT COUNT(*) FROM adult WHERE age BETWEEN 25 AND 34",
        "SELECT sex, COUNT(*) FROM adult WHERE age >= 60 GROUP BY sex",
    ]
    prepared = prepare(adult_connection, statements, epsilon=1.0)
    assert prepared.batch.row_filters == ()
    first, second = prepared.batch.workload.products
    assert [f.attributes for f in first.factors] == [("age",)] and first.factors[0].block.interval() == (25 - 17, 34 - 17)
    assert {f.attributes for f in second.factors} == {("sex",), ("age",)}
    with dpsql.testing.noise_disabled():
        results = release(adult_connection, prepared)
    frame = make_adult()
    assert results[0].rows[0][0] == pytest.approx(((frame.age >= 25) & (frame.age <= 34)).sum())
    assert dict(results[1].rows)["F"] == pytest.approx(((frame.age >= 60) & (frame.sex == "F")).sum())
    same_where = prepare(adult_connection, ["SELECT sex, COUNT(*) FROM adult WHERE age >= 60 GROUP BY CUBE (sex)"], epsilon=1.0)
    assert len(same_where.batch.row_filters) == 1  # one WHERE for every grouping set: filtered in SQL


def test_parameters_bind_in_every_branch(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute("SELECT sex, COUNT(*) FROM adult WHERE age >= ? GROUP BY ROLLUP (sex)", (50,), epsilon=1.0)
        with_parameter = cursor.fetchall()
        cursor.execute("SELECT sex, COUNT(*) FROM adult WHERE age >= 50 GROUP BY ROLLUP (sex)", epsilon=1.0)
    assert with_parameter == cursor.fetchall()


def test_union_all_members_bind_their_own_parameters(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    sql = (
        "SELECT sex, COUNT(*) FROM adult WHERE age < ? GROUP BY sex UNION ALL "
        "SELECT sex, COUNT(*) FROM adult WHERE age >= ? AND race = ? GROUP BY ROLLUP (sex)"
    )
    cursor = adult_connection.cursor()
    with dpsql.testing.noise_disabled():
        rows = cursor.execute(sql, (40, 60, 1), epsilon=1.0).fetchall()
    young = adult_frame[adult_frame.age < 40].groupby("sex").size()
    old = adult_frame[(adult_frame.age >= 60) & (adult_frame.race == 1)]
    assert [round(r[1]) for r in rows] == [young["F"], young["M"], (old.sex == "F").sum(), (old.sex == "M").sum(), len(old)]
    for wrong in [(40, 60), None, (1, 2, 3, 4)]:
        with pytest.raises(dpsql.ProgrammingError, match="3 '\\?' placeholder"):
            cursor.execute(sql, wrong, epsilon=1.0)


# --------------------------------------------------------------------------------------------------
# Bad inputs: clear errors, nothing charged.
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", REJECTED, ids=lambda p: p.stem)
def test_rejected_statement_names_the_problem(path: Path, adult_connection: dpsql.Connection) -> None:
    header, sql = path.read_text().split("\n", 1)
    match = EXPECT.match(header)
    assert match, f"{path.name} must start with '-- expect: <ErrorClass> <words>'"
    before = adult_connection.budget_remaining()
    with pytest.raises(getattr(dpsql, match.group(1))) as raised:
        adult_connection.cursor().execute(sql, epsilon=0.5)
    assert type(raised.value) is getattr(dpsql, match.group(1))
    assert match.group(2).lower() in str(raised.value).lower(), str(raised.value)
    assert adult_connection.budget_remaining() == before


def test_batch_input_errors(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame, adult_schema: dict) -> None:
    adult_connection.register("other", adult_frame, schema=adult_schema)
    before = adult_connection.budget_remaining()
    with pytest.raises(dpsql.NotSupportedError, match="one table"):
        adult_connection.workload(["SELECT COUNT(*) FROM adult", "SELECT COUNT(*) FROM other"], epsilon=1.0)
    with pytest.raises(dpsql.ProgrammingError, match="non-empty list"):
        adult_connection.workload([], epsilon=1.0)
    with pytest.raises(dpsql.ProgrammingError, match="non-empty list"):
        adult_connection.workload("SELECT COUNT(*) FROM adult", epsilon=1.0)
    with pytest.raises(dpsql.ProgrammingError, match="no privacy cost"):
        adult_connection.workload(["SELECT COUNT(*) FROM adult"])
    assert adult_connection.budget_remaining() == before
    small = dpsql.connect(budget=dpsql.Budget(epsilon=1.0))
    small.register("adult", adult_frame, schema=adult_schema)
    with pytest.raises(dpsql.BudgetExceededError):
        small.workload(["SELECT sex, COUNT(*) FROM adult GROUP BY CUBE (sex)"], epsilon=2.0)
    assert small.budget_spent().statements == 0
    small.close()


def test_batch_statements_grouping_the_same_columns_in_other_orders(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    """Regression: the merged domain takes the first statement's column order; a later statement's
    rows must still come back under its own keys (they were permuted: (0, 'M') got ('F', 1)'s count)."""
    statements = [
        "SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race",
        "SELECT race, sex, COUNT(*) FROM adult GROUP BY race, sex",
        "SELECT race, job, sex, COUNT(*) FROM adult GROUP BY GROUPING SETS ((race, job, sex), (sex, race))",
    ]
    with dpsql.testing.noise_disabled():
        results = adult_connection.workload(statements, epsilon=1.0)
    for sql, result in zip(statements, results):
        counts = [len(result.rows[0]) - 1]  # the count is the last column
        assert _without_zero_counts(result.rows, counts) == _without_zero_counts(_duckdb_rows(sql, adult_frame), counts)


@pytest.mark.parametrize("noise, cost", [("laplace", {"epsilon": 5000.0}), ("gaussian", {"rho": 1e7})])
def test_a_very_large_budget_releases_exact_counts_with_tiny_positive_errors(
    noise: str, cost: dict[str, float], adult_frame: pd.DataFrame, adult_schema: dict
) -> None:
    """The noise scale would be so small that its variance underflows to 0 (GLS then divided by it);
    the sampler raises it to planner.noise's minimum, where the noise is 0 but the variance positive."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e9, delta=1e-6), noise=noise)
    connection.register("adult", adult_frame, schema=adult_schema)
    cursor = connection.cursor().execute("SELECT sex, COUNT(*) FROM adult GROUP BY CUBE (sex)", **cost)
    rows, errors = cursor.fetchall(), cursor.errors
    exact = adult_frame.groupby("sex").size()
    assert rows == [("F", pytest.approx(exact["F"])), ("M", pytest.approx(exact["M"])), (None, pytest.approx(exact.sum()))]
    assert all(0 < e[1] < 1e-50 for e in errors)
    assert "ratio to lower bound" in cursor.explanation  # the report divides by the expected error too


@pytest.mark.parametrize("order", ["", " DESC", " NULLS FIRST", " DESC NULLS LAST", " ASC NULLS LAST", " DESC NULLS FIRST"])
def test_order_by_puts_the_rolled_up_null_where_written(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame, order: str) -> None:
    """NULL sorts last in both directions (DuckDB's default) unless NULLS FIRST is written: a ROLLUP's total row
    (its key NULL) follows the ORDER BY as DuckDB orders it."""
    sql = f"SELECT sex, COUNT(*) AS n FROM adult GROUP BY ROLLUP (sex) ORDER BY 1{order}"
    with dpsql.testing.noise_disabled():
        keys = [row[0] for row in adult_connection.cursor().execute(sql, epsilon=1.0).fetchall()]
    frame = adult_frame  # noqa: F841 - read by DuckDB below
    assert keys == [row[0] for row in duckdb.sql(sql.replace("FROM adult", "FROM frame")).fetchall()]
