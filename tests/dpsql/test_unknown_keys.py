"""GROUP BY over a column with no public domain (dpsql.keys): partition selection end to end.

Data sets are built so that the quantities under test can be counted by hand: which keys exist,
how many units hold each, how many keys and rows each unit has.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ADULT_SCHEMA

import dpsql
import dpsql.testing
import planner
from pipeline_helpers import prepare

from dpsql import keys
from dpsql.backends.dialects import POSTGRES, SPARK
from dpsql.schema import ColumnDomain
from dpsql.sql.bounded import BoundedAggregation, KeyedColumn
from dpsql.sql.literals import ColumnType
from planner import keyed_release, selection_split
from planner.noise import discrete_gaussian_variance, discrete_laplace_variance
from planner.partition import gaussian_threshold, laplace_threshold, optimal

GRAMMAR = Path(__file__).resolve().parents[2] / "grammar"
COUNT_ROWS = "SELECT browser, COUNT(*) FROM logs GROUP BY browser"  # selected by thresholding its measured counts
COUNT_KEYS = "SELECT browser, COUNT(browser) FROM logs GROUP BY browser"  # COUNT(column): selection by a split of ε


def _schema(**bounds: int) -> dict[str, object]:
    return {
        "privacy_unit": "user_id",
        "max_rows_per_unit": bounds.pop("m", 4),
        "columns": {"sex": {"categories": ["F", "M"]}, "browser": "unknown"},
        **bounds,
    }


def _connect(frame: pd.DataFrame, schema: dict[str, object], epsilon: float = 100.0, delta: float = 1e-6, **options: object) -> dpsql.Connection:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=epsilon, delta=delta), **options)  # type: ignore[arg-type]
    connection.register("logs", frame, schema=schema)
    return connection


def _one_key_per_user(units_per_key: dict[str, int], rows_per_unit: int = 1, seed: int = 0) -> pd.DataFrame:
    """Every user has ``rows_per_unit`` rows, all in one browser; ``units_per_key[b]`` users use ``b``."""
    rng = np.random.default_rng(seed)
    browsers = np.repeat(list(units_per_key), list(units_per_key.values()))
    users = np.arange(1, len(browsers) + 1)
    return pd.DataFrame(
        {
            "user_id": np.repeat(users, rows_per_unit),
            "browser": np.repeat(browsers, rows_per_unit).astype(object),
            "sex": rng.choice(["F", "M"], size=len(users) * rows_per_unit),
        }
    )


@pytest.fixture()
def logs() -> Iterator[dpsql.Connection]:
    """Three popular browsers (300, 200, 100 users) and one used by a single user; bounds that bound nothing."""
    frame = _one_key_per_user({"chrome": 300, "firefox": 200, "safari": 100, "lynx": 1}, rows_per_unit=2)
    connection = _connect(frame, _schema(m=4, max_groups_per_unit=2, max_rows_per_group=2))
    yield connection
    connection.close()


def _exact(frame: pd.DataFrame, sql: str) -> dict[tuple[object, ...], int]:
    import duckdb

    database = duckdb.connect()
    database.register("logs", frame)
    found = {row[:-1]: int(row[-1]) for row in database.execute(sql).fetchall()}
    database.close()
    return found


# -- selection and counting -------------------------------------------------------------------------------


def test_noise_free_counts_of_released_keys_equal_duckdb(logs: dpsql.Connection) -> None:
    frame = logs._session.backend.connection.execute('SELECT * FROM "__dpsql_logs"').df()  # type: ignore[attr-defined]
    cursor = logs.cursor()
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(1):
        cursor.execute("SELECT browser, COUNT(*) AS n FROM logs GROUP BY browser ORDER BY n DESC", epsilon=1.0)
        single = cursor.fetchall()
        cursor.execute("SELECT browser, sex, COUNT(*) FROM logs GROUP BY browser, sex", epsilon=1.0)
        mixed = cursor.fetchall()
    exact = _exact(frame, "SELECT browser, COUNT(*) FROM logs GROUP BY browser")
    assert [row[0] for row in single] == ["chrome", "firefox", "safari"]  # lynx (1 user) is not released
    assert all(row[1] == pytest.approx(exact[(row[0],)], abs=1e-9) for row in single)
    exact_mixed = _exact(frame, "SELECT browser, sex, COUNT(*) FROM logs GROUP BY browser, sex")
    assert {(b, s) for b, s, _ in mixed} == {(b, s) for b in ("chrome", "firefox", "safari") for s in ("F", "M")}
    assert all(n == pytest.approx(exact_mixed.get((b, s), 0), abs=1e-9) for b, s, n in mixed)


def test_keys_absent_from_the_data_never_appear() -> None:
    """Every released key is one of the data's keys, over many seeded selections with a large δ
    (where even a key with one unit is often released)."""
    frame = _one_key_per_user({f"k{i}": 1 + i % 3 for i in range(40)})
    data_keys = set(frame["browser"])
    seen: set[object] = set()
    for seed in range(15):  # a fresh connection (budget and key cache) per selection
        connection = _connect(frame, _schema(m=1), epsilon=1000.0, delta=0.5)
        connection.selection_delta = 0.3
        with dpsql.testing.seeded(seed):
            rows = connection.cursor().execute("SELECT browser, COUNT(*) FROM logs GROUP BY browser", epsilon=1.0).fetchall()
        seen |= {row[0] for row in rows}
        connection.close()
    assert seen and seen <= data_keys
    assert len(seen) > 20  # selection did release many small keys: the check above had something to check


def test_a_key_with_many_units_is_always_released(logs: dpsql.Connection) -> None:
    """Both designs: thresholding the measured counts (COUNT(*)) and the split (COUNT(browser))."""
    logs.selection_delta = 1e-8  # ten selections fit in the budget's δ
    thresholded = prepare(logs, [COUNT_ROWS], epsilon=1.0).selection.thresholded.release  # type: ignore[union-attr]
    assert thresholded.keep_probability(np.array([200]))[0] == pytest.approx(1.0, abs=1e-12)
    primitive = prepare(logs, [COUNT_KEYS], epsilon=1.0).selection.split.primitive  # type: ignore[union-attr]
    assert primitive.probability_of_keep(100) == pytest.approx(1.0, abs=1e-12)
    for seed in range(10):
        logs._session.keys = keys.ReleasedKeys()  # forget the released key set: select afresh
        with dpsql.testing.seeded(seed):
            rows = logs.cursor().execute(COUNT_ROWS if seed % 2 else COUNT_KEYS, epsilon=1.0).fetchall()
        assert {"chrome", "firefox", "safari"} <= {row[0] for row in rows}


@pytest.mark.parametrize("sql", [COUNT_ROWS, COUNT_KEYS], ids=["thresholded counts", "split"])
def test_keys_held_by_one_unit_are_released_with_probability_pi_of_one(sql: str) -> None:
    """600 keys with one unit each: the number released is Binomial(600, π(1)) (4-sigma bounds), and
    π(1) is at most the selection δ."""
    frame = _one_key_per_user({f"key{i:03d}": 1 for i in range(600)})
    connection = _connect(frame, _schema(m=1), epsilon=10.0, delta=0.5)
    connection.selection_delta = 0.2
    selection = prepare(connection, [sql], epsilon=2.0).selection
    if selection.thresholded is not None:  # type: ignore[union-attr]
        rule = selection.thresholded.release  # type: ignore[union-attr]
        probability = keyed_release.sum_tail(rule.key_privacy, rule.noise_parameter, 1, rule.threshold - 1)  # P(1 + Z ≥ τ), exact
    else:
        probability = float(selection.split.primitive.probability_of_keep(1))  # type: ignore[union-attr]
    assert 0.05 < probability <= 0.2 + 1e-12  # π(1) never exceeds δ
    with dpsql.testing.seeded(3):
        released = connection.cursor().execute(sql, epsilon=2.0).rowcount
    spread = 4 * math.sqrt(600 * probability * (1 - probability))
    assert abs(released - 600 * probability) <= spread


# -- bounding in SQL ----------------------------------------------------------------------------------------


def test_each_unit_contributes_to_at_most_k_keys_and_r_rows_per_key() -> None:
    """Every one of 120 users has 3 rows in each of the same 10 browsers: with k = 2 and r = 2 each user
    adds exactly 2 rows to exactly 2 browsers, so the released counts sum to 120·2·2 and the distinct
    users per browser sum to 120·2."""
    browsers = [f"b{i}" for i in range(10)]
    users = np.arange(1, 121)
    frame = pd.DataFrame(
        {
            "user_id": np.repeat(users, 30),
            "browser": np.tile(np.repeat(browsers, 3), len(users)).astype(object),
            "sex": "F",
        }
    )
    connection = _connect(frame, _schema(m=30, max_groups_per_unit=2, max_rows_per_group=2), delta=0.5)
    connection.selection_delta = 0.4  # keys with ~24 users are then released with certainty
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(5):
        rows = connection.cursor().execute("SELECT browser, COUNT(*) FROM logs GROUP BY browser", epsilon=20.0).fetchall()
    assert len(rows) == 10
    assert sum(n for _, n in rows) == pytest.approx(120 * 2 * 2)
    assert all(round(n) % 2 == 0 and n == pytest.approx(round(n)) and n > 0 for _, n in rows)  # whole users of 2 rows
    # the same bounds, read directly from the one statement: distinct units per key, the rest in the remainder
    table = connection._session.table("logs")
    aggregation = BoundedAggregation(
        table=table.relation, columns={"browser": keys.placeholder_domain("browser")}, column_types=table.column_types,
        marginals=(("browser",),), privacy_unit="user_id", max_rows_per_unit=30, salt=11, row_columns=tuple(table.column_types),
        keyed=KeyedColumn("browser", 2, 2, count_units=True),
    )
    histogram = aggregation.key_histogram(connection._session.backend.run(aggregation.statement().sql(dialect="duckdb")))
    assert sorted(histogram.keys) == browsers  # type: ignore[type-var]
    assert int(histogram.units.sum()) == 120 * 2 and int(histogram.counts.sum()) == 120 * 2 * 2
    assert int(histogram.remainder.sum()) == 120 * (30 - 2 * 2)  # every other row of a user: counted in totals


def test_bounded_statement_renders_for_every_backend_dialect() -> None:
    varchar = ColumnType.of("VARCHAR", "duckdb")
    aggregation = BoundedAggregation(
        table="t", columns={"k": keys.placeholder_domain("k"), "s": ColumnDomain("s", "categories", ("F", "M"))},
        column_types={"k": varchar, "s": varchar}, marginals=(("k", "s"),), privacy_unit="u", max_rows_per_unit=5,
        salt=7, row_columns=("u", "k", "s"), keyed=KeyedColumn("k", 3, 2, count_units=True),
    )
    statement = aggregation.statement()
    duck = statement.sql(dialect="duckdb")
    assert "DENSE_RANK() OVER (PARTITION BY unit ORDER BY HASH(HASH(unit, c0, 7)), c0)" in duck
    assert "key_in_unit <= 3" in duck and "row_in_key <= 2" in duck and "row_in_unit <= 5" in duck
    assert "COUNT(DISTINCT unit)" in duck and "GROUPING SETS ((c0, key_kept, c1), (c0, key_kept))" in duck
    assert "HASHTEXTEXTENDED" in statement.sql(dialect=POSTGRES).upper()
    assert "XXHASH64" in statement.sql(dialect=SPARK).upper()


# -- the budget: one charge, the key cache, EXPLAIN ---------------------------------------------------------


def test_statement_charges_its_cost_once_and_the_cached_key_set_charges_no_selection(logs: dpsql.Connection) -> None:
    cursor = logs.cursor()
    sql = "SELECT browser, COUNT(*) FROM logs GROUP BY browser"
    delta = logs._session.selection_delta()
    assert delta == pytest.approx(1e-7)  # a tenth of the budget's δ by default
    cursor.execute(sql, epsilon=1.0)
    first = logs.budget_spent()
    assert (first.epsilon, first.statements) == (pytest.approx(1.0), 1) and 0 < first.delta <= delta
    assert "keys: released = 3 — of 'browser', newly selected" in cursor.explanation
    cursor.execute("SELECT browser, sex, COUNT(*) FROM logs GROUP BY browser, sex", epsilon=0.5)
    second = logs.budget_spent()
    assert (second.epsilon, second.delta, second.statements) == (pytest.approx(1.5), first.delta, 2)
    assert logs.budget_remaining().delta == pytest.approx(1e-6 - first.delta)
    assert "keys: cached = 3" in cursor.explanation and "from the cached key set" in cursor.explanation
    assert {row[0] for row in cursor.fetchall()} == {"chrome", "firefox", "safari"}
    assert "keys: cached = 3" in logs.explain(sql, epsilon=0.5)
    frame = _one_key_per_user({"opera": 50})
    logs.register("logs", frame, schema=_schema(m=4, max_groups_per_unit=2, max_rows_per_group=2))  # new data: select afresh
    assert "selection" in logs.explain(sql, epsilon=0.5)


def test_explain_shows_the_primitive_and_reads_and_charges_nothing(logs: dpsql.Connection) -> None:
    statements: list[str] = []
    run = logs._session.backend.run
    logs._session.backend.run = lambda sql: statements.append(sql) or run(sql)  # type: ignore[method-assign]
    cursor = logs.cursor().execute("EXPLAIN " + COUNT_KEYS, epsilon=1.0)
    rows = cursor.fetchall()
    assert statements == [] and logs.budget_spent().statements == 0
    assert [d[0] for d in cursor.description] == ["section", "name", "value", "detail"]
    by_name = {(section, name): (value, detail) for section, name, value, detail in rows}
    chosen = prepare(logs, [COUNT_KEYS], epsilon=1.0).selection.split  # type: ignore[union-attr]
    primitive = chosen.primitive
    value, detail = by_name[("selection", primitive.name)]
    assert value == pytest.approx(primitive.midpoint()) and detail == primitive.describe()
    assert "P[keep] = 1/2 at n" in detail and "epsilon=" in detail
    assert by_name[("selection", "always kept from n")][0] == (primitive.always_kept() if math.isfinite(primitive.always_kept()) else None)
    assert by_name[("split", "selection fraction")][0] == chosen.fraction
    assert by_name[("cost", "selection delta")][0] == pytest.approx(1e-7)
    assert "withheld" in by_name[("keys", "considered")][1]
    explained = logs.explain(COUNT_KEYS, epsilon=1.0)
    assert primitive.describe() in explained and logs.budget_spent().statements == 0
    thresholded = dict(((section, name), (value, detail)) for section, name, value, detail in logs.cursor().execute("EXPLAIN " + COUNT_ROWS, epsilon=1.0).fetchall())
    rule = prepare(logs, [COUNT_ROWS], epsilon=1.0).selection.thresholded.release  # type: ignore[union-attr]
    assert thresholded[("selection", "threshold")] == (rule.threshold, rule.describe())
    assert thresholded[("cost", "selection delta")][0] == pytest.approx(rule.delta) and rule.delta <= 1e-7
    assert statements == [] and logs.budget_spent().statements == 0


def test_more_than_one_key_per_unit_chooses_between_split_optimal_and_gaussian_thresholding() -> None:
    chosen = {
        selection_split.split(planner.Privacy.laplace(1.0), 1e-6, k, 2 * k, False).primitive.name for k in (2, 8)
    }
    assert chosen == {"optimal", "Gaussian thresholding"}  # both are used, each where its midpoint is lower
    for k in (2, 8):
        made = selection_split.split(planner.Privacy.laplace(1.0), 1e-6, k, 2 * k, False)
        split = optimal(made.primitive.epsilon, 1e-6, k)
        assert made.primitive.midpoint() <= split.midpoint() + 1e-9
        assert f"max_groups={k}" in made.primitive.describe()


def test_gaussian_noise_charges_zcdp_counting_plus_the_selection_part() -> None:
    frame = _one_key_per_user({"chrome": 300, "firefox": 200})
    connection = _connect(frame, _schema(m=2, max_rows_per_group=2), epsilon=100.0, delta=1e-5, noise="gaussian")
    with dpsql.testing.seeded(2):
        cursor = connection.cursor().execute("SELECT browser, COUNT(browser) FROM logs GROUP BY browser", rho=0.5)
    made = selection_split.split(planner.Privacy.zcdp(0.5), 1e-6, 1, 2, False)
    spent = connection.budget_spent()
    assert spent.rho == pytest.approx(0.5 * (1 - made.fraction))
    assert made.primitive.epsilon == pytest.approx(math.sqrt(2 * made.fraction * 0.5))
    assert {row[0] for row in cursor.fetchall()} == {"chrome", "firefox"}
    errors = [e[1] for e in cursor.errors]
    assert errors[0] == pytest.approx(math.sqrt(4 / (2 * 0.5 * (1 - made.fraction))), rel=1e-3)  # σ² = c²/(2ρ), c = 2
    with dpsql.testing.seeded(3):  # thresholding the measured counts: the whole ρ counts, selection only costs δ
        counted = _connect(frame, _schema(m=2, max_rows_per_group=2), epsilon=100.0, delta=1e-5, noise="gaussian")
        errors = counted.cursor().execute(COUNT_ROWS, rho=0.5).errors
    selection_delta = 1e-5 - counted.budget_remaining().delta  # what the (ε, δ) part of the charge took
    assert counted.budget_spent().rho == pytest.approx(0.5) and 0 < selection_delta <= 1e-6
    # a released key's count (300 rows, far above the threshold): its 95 % band inverts the discrete Gaussian law
    # of σ² = c²/(2ρ) = 4 itself — half-width the largest h with P(Z ≥ h) > 2.5 %, 4 — not 1.96·σ = 3.92
    support = np.arange(-40, 41)
    law = np.exp(-(support**2) / (2 * 4.0)) / np.exp(-(support**2) / (2 * 4.0)).sum()
    half_width = max(h for h in range(20) if law[support >= h].sum() > 0.025)
    assert half_width == 4 and errors[0][1] == pytest.approx(half_width / 1.959964, rel=1e-6)


# -- the split objective ------------------------------------------------------------------------------------


def test_worst_key_error_is_the_maximum_over_n_of_the_per_key_mse() -> None:
    primitive = optimal(1.0, 1e-3)
    variance = 7.0
    n = np.arange(1, int(primitive.always_kept()) + 1)
    keep = primitive.probability_of_keep(n)
    assert selection_split.worst_key_error(primitive, variance) == pytest.approx(float(np.max(keep * variance + (1 - keep) * n**2)))
    assert selection_split.worst_key_error(primitive, 1e6) == pytest.approx(1e6)  # noisy counts dominate: V at large n


def test_the_chosen_split_is_no_worse_than_any_grid_fraction(logs: dpsql.Connection) -> None:
    made = selection_split.split(planner.Privacy.laplace(1.0), 1e-6, 1, 3, False)
    for fraction in selection_split.SELECTION_FRACTIONS:
        primitive = optimal(fraction, 1e-6)
        variance = selection_split.count_variance(planner.Privacy.laplace(1 - fraction), 3)
        assert made.objective <= selection_split.worst_key_error(primitive, variance) + 1e-9
    cost = prepare(logs, ["SELECT browser, COUNT(*) FROM logs GROUP BY browser"], epsilon=1.0).cost
    assert cost.epsilon + cost.approximate_epsilon == pytest.approx(1.0)


# -- bad inputs: clear errors, nothing charged ------------------------------------------------------------------


def test_delta_zero_refuses_selection_and_charges_nothing() -> None:
    connection = _connect(_one_key_per_user({"chrome": 30}), _schema(), delta=0.0)
    with pytest.raises(dpsql.ProgrammingError, match="delta = 0.*declare the column's domain"):
        connection.cursor().execute("SELECT browser, COUNT(*) FROM logs GROUP BY browser", epsilon=1.0)
    connection.selection_delta = 0.0
    with pytest.raises(dpsql.ProgrammingError, match="delta = 0"):
        connection.explain("SELECT browser, COUNT(*) FROM logs GROUP BY browser", epsilon=1.0)
    assert connection.budget_spent().statements == 0


@pytest.mark.parametrize(("bounds", "message"), [
    ({"max_groups_per_unit": 0}, "max_groups_per_unit must be a positive integer"),
    ({"max_groups_per_unit": "2"}, "max_groups_per_unit must be a positive integer"),
    ({"max_rows_per_group": -1}, "max_rows_per_group must be a positive integer"),
])
def test_bad_bounds_are_refused_by_the_schema(bounds: dict[str, object], message: str) -> None:
    with pytest.raises(dpsql.ProgrammingError, match=message):
        dpsql.schema.Schema.load(_schema(**bounds))  # type: ignore[arg-type]
    with pytest.raises(dpsql.ProgrammingError, match="must be 1 when privacy_unit is null"):
        dpsql.schema.Schema.load({"privacy_unit": None, "max_groups_per_unit": 2, "columns": {}})


def test_a_delta_the_budget_cannot_pay_is_refused_before_reading(logs: dpsql.Connection) -> None:
    logs.selection_delta = 2e-6  # the budget's δ is 1e-6
    with pytest.raises(dpsql.BudgetExceededError, match="more delta than the budget has left"):
        logs.cursor().execute("SELECT browser, COUNT(*) FROM logs GROUP BY browser", epsilon=1.0)
    with pytest.raises(dpsql.ProgrammingError, match="selection_delta must be a number"):
        logs.selection_delta = "a lot"  # type: ignore[assignment]
    with pytest.raises(dpsql.ProgrammingError, match="selection_delta must be a number"):
        dpsql.connect(budget=dpsql.Budget(1.0, 1e-6), selection_delta=2.0)
    assert logs.budget_spent().statements == 0


# -- the grammar corpus for unknown keys -------------------------------------------------------------------------

ACCEPTED = sorted((GRAMMAR / "accepted" / "unknown").glob("*.sql"))
REJECTED = sorted((GRAMMAR / "rejected" / "unknown").glob("*.sql"))


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: p.stem)
def test_accepted_unknown_key_statement_runs(path: Path, adult_connection: dpsql.Connection) -> None:
    before = adult_connection.budget_spent().statements
    cursor = adult_connection.cursor().execute(path.read_text(), epsilon=1.0)
    assert cursor.description is not None and cursor.rowcount >= 0
    assert adult_connection.budget_spent().statements == before + (0 if path.read_text().lstrip().upper().startswith("EXPLAIN") else 1)


@pytest.mark.parametrize("path", REJECTED, ids=lambda p: p.stem)
def test_rejected_unknown_key_statement_names_the_clause(path: Path, adult_connection: dpsql.Connection) -> None:
    header, sql = path.read_text().split("\n", 1)
    expected_class, clause = header.removeprefix("-- expect: ").split(" ", 1)
    with pytest.raises(getattr(dpsql, expected_class), match=clause):
        adult_connection.cursor().execute(sql, epsilon=0.5)
    assert adult_connection.budget_spent().statements == 0


def test_corpus_holds_both_kinds() -> None:
    assert len(ACCEPTED) >= 4 and len(REJECTED) >= 4


def test_integer_keys_and_the_null_key_are_keys_like_any_other() -> None:
    """An integer-typed unknown column with NULLs: NULL is released as a key (None), and the cached key
    set (integers and NULL) filters the rows of a later statement exactly."""
    frame = _one_key_per_user({"7": 150, "42": 120, "none": 90})
    frame["browser"] = frame["browser"].map({"7": 7, "42": 42, "none": None}).astype("Int64")
    connection = _connect(frame, _schema(m=1))
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(4):
        first = cursor.execute("SELECT browser, COUNT(*) FROM logs GROUP BY browser", epsilon=2.0).fetchall()
        second = cursor.execute("SELECT browser, sex, COUNT(browser) FROM logs GROUP BY browser, sex", epsilon=2.0).fetchall()
    assert [row[0] for row in first] == [7, 42, None]  # sorted keys, NULL last
    assert [row[1] for row in first] == [pytest.approx(150), pytest.approx(120), pytest.approx(90)]
    assert cursor.description[0][1] == dpsql.NUMBER
    by_key: dict[object, float] = {}
    for key, _, n in second:
        by_key[key] = by_key.get(key, 0.0) + n
    assert by_key == {7: pytest.approx(150), 42: pytest.approx(120), None: 0.0}  # COUNT(browser) skips NULL


def test_batches_group_by_a_released_key_set_as_a_public_domain(logs: dpsql.Connection) -> None:
    cursor = logs.cursor()
    with dpsql.testing.seeded(8), dpsql.testing.noise_disabled():  # exact kept counts: the CUBE combines with them
        cursor.execute("SELECT browser, COUNT(*) FROM logs GROUP BY browser", epsilon=1.0)
    before = logs.budget_spent()
    with dpsql.testing.noise_disabled():
        rows = cursor.execute("SELECT browser, sex, COUNT(*) FROM logs GROUP BY CUBE (browser, sex)", epsilon=0.5).fetchall()
    after = logs.budget_spent()
    assert (after.epsilon - before.epsilon, after.delta - before.delta) == (pytest.approx(0.5), 0.0)
    assert {row[0] for row in rows} == {"chrome", "firefox", "safari", None}  # None: the rolled-up browser
    total = [n for browser, sex, n in rows if browser is None and sex is None]
    assert total == [pytest.approx(2 * (300 + 200 + 100 + 1))]  # lynx's rows count in the remainder: the whole table


def test_units_with_several_keys_keep_k_of_them(adult_frame: pd.DataFrame) -> None:
    """The census fixture (1-3 rows per person, random browsers) with k = 2, r = 1: the released counts add
    up to Σ over persons of min(distinct browsers, 2), computed by pandas (test_backends runs the
    accepted unknown/ corpus on Spark and PostgreSQL against DuckDB)."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=100.0, delta=1e-6))
    connection.register("adult", adult_frame, schema={**ADULT_SCHEMA, "max_groups_per_unit": 2, "max_rows_per_group": 1})
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(3):
        rows = connection.cursor().execute("SELECT browser, sex, COUNT(*) FROM adult GROUP BY browser, sex", epsilon=1.0).fetchall()
    expected = int(adult_frame.groupby("person_id")["browser"].nunique().clip(upper=2).sum())
    assert sum(row[2] for row in rows) == pytest.approx(expected)
    assert expected < len(adult_frame)  # the bound did drop rows


def test_mixed_group_by_with_where_equals_duckdb_without_noise(logs: dpsql.Connection) -> None:
    frame = logs._session.backend.connection.execute('SELECT * FROM "__dpsql_logs"').df()  # type: ignore[attr-defined]
    sql = "SELECT sex, browser, COUNT(*) FROM logs WHERE sex = 'F' GROUP BY sex, browser"
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(6):
        rows = logs.cursor().execute(sql, epsilon=1.0).fetchall()
    exact = _exact(frame, sql)
    assert {(s, b) for s, b, _ in rows} == {("F", b) for b in ("chrome", "firefox", "safari")}  # M: excluded by the WHERE clause
    for sex, browser, n in rows:
        assert n == pytest.approx(exact.get((sex, browser), 0), abs=1e-9)


@pytest.mark.parametrize("primitive", [laplace_threshold(1.0, 1e-6), gaussian_threshold(1.0, 1e-6, 3)], ids=lambda p: p.name)
def test_kept_squared_error_matches_simulation_and_tends_to_the_noise_variance(primitive: object) -> None:
    """E[Z²; kept] of a thresholding primitive (the objective's error of a re-used noisy count):
    200 000 seeded draws at n near the threshold agree within 5 standard errors, and far above the
    threshold it equals the noise variance."""
    rng = np.random.default_rng(12)
    n = round(primitive.midpoint())  # type: ignore[attr-defined]
    mask, noisy = primitive.keep(np.full(200_000, n), rng=rng)  # type: ignore[attr-defined]
    draws = np.where(mask, (noisy - n).astype(float) ** 2, 0.0)
    assert abs(draws.mean() - primitive.kept_squared_error(n)) <= 5 * draws.std() / math.sqrt(draws.size)  # type: ignore[attr-defined]
    scale = primitive.noise_scale  # type: ignore[attr-defined]
    variance = discrete_laplace_variance(scale) if primitive.name.startswith("Laplace") else discrete_gaussian_variance(scale**2)  # type: ignore[attr-defined]
    far = primitive.threshold + 60 * math.ceil(scale)  # type: ignore[attr-defined]
    assert primitive.kept_squared_error(far) == pytest.approx(variance, rel=1e-6)  # type: ignore[attr-defined]
    assert primitive.kept_squared_error(0) == 0.0  # type: ignore[attr-defined]


def test_other_statements_read_a_released_key_set_as_a_public_domain(logs: dpsql.Connection) -> None:
    cursor = logs.cursor()
    with pytest.raises(dpsql.NotSupportedError, match="WHERE: column 'browser' has no declared domain"):
        cursor.execute("SELECT COUNT(*) FROM logs WHERE browser = 'chrome'", epsilon=1.0)
    with dpsql.testing.seeded(9), dpsql.testing.noise_disabled():  # exact kept counts: later statements combine with them
        cursor.execute("SELECT browser, COUNT(*) FROM logs GROUP BY browser", epsilon=1.0)
    with dpsql.testing.noise_disabled():
        total = cursor.execute("SELECT COUNT(*) FROM logs WHERE browser IN ('chrome', 'safari')", epsilon=0.5).fetchall()
        keyed = cursor.execute("SELECT browser, COUNT(*) FROM logs WHERE browser <> 'chrome' GROUP BY browser", epsilon=0.5).fetchall()
        many = cursor.executemany("SELECT browser, COUNT(*) FROM logs WHERE sex = ? GROUP BY browser", [("F",), ("M",)], epsilon=0.5).fetchall()
    assert total == [(pytest.approx(2 * 400),)]
    assert keyed == [("firefox", pytest.approx(400)), ("safari", pytest.approx(200))]  # chrome: excluded by the WHERE clause
    assert sum(n for _, n in many) == pytest.approx(2 * 600) and len(many) == 6
    with pytest.raises(dpsql.DataError, match="is not among the released keys of 'browser'"):
        cursor.execute("SELECT COUNT(*) FROM logs WHERE browser = 'lynx'", epsilon=0.5)  # not a released key
    assert 0 < logs.budget_spent().delta <= logs._session.selection_delta()  # one selection in all


def test_rows_outside_a_declared_domain_are_not_counted_for_any_key() -> None:
    """The row rule of every statement: a row with an out-of-domain value in a declared column (sex =
    'X') is not counted, even by a GROUP BY on an unknown column that does not mention it."""
    frame = _one_key_per_user({"chrome": 300, "firefox": 200}, rows_per_unit=1)
    frame.loc[frame.index[:50], "sex"] = "X"  # 50 chrome users outside sex's domain
    connection = _connect(frame, _schema(m=1))
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(3):
        rows = dict(connection.cursor().execute("SELECT browser, COUNT(*) FROM logs GROUP BY browser", epsilon=1.0).fetchall())
    assert rows == {"chrome": pytest.approx(250.0), "firefox": pytest.approx(200.0)}


def test_counting_the_selected_column_in_the_selecting_statement(logs: dpsql.Connection) -> None:
    """COUNT(browser) while selecting browser's keys: prepared over a stand-in key (not over an empty
    domain, where the count would be zero by construction and nothing would be selected)."""
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(2):
        rows = logs.cursor().execute("SELECT browser, COUNT(browser) FROM logs GROUP BY browser", epsilon=1.0).fetchall()
    assert dict(rows) == {"chrome": pytest.approx(600), "firefox": pytest.approx(400), "safari": pytest.approx(200)}
    assert logs.budget_spent().delta > 0


def test_a_cube_over_selected_keys_is_consistent_and_counts_the_whole_table(logs: dpsql.Connection) -> None:
    """One statement selects the keys from its own measured counts: every key's total is the sum of its
    released cells, the grand total the sum of the (sex) totals, and those totals count every row (the
    lynx user included, in the hidden remainder); with the noise off they are DuckDB's exact counts."""
    sql = "SELECT browser, sex, GROUPING(browser, sex) AS g, COUNT(*) FROM logs GROUP BY CUBE (browser, sex)"
    assert "selection: threshold" in logs.cursor().execute("EXPLAIN " + sql, epsilon=1.0).explanation
    with dpsql.testing.seeded(5):
        noisy = logs.cursor().execute(sql, epsilon=1.0).fetchall()
    cells = {(b, s): n for b, s, g, n in noisy if g == 0}
    for browser, _, g, n in noisy:
        if g == 1:
            assert n == pytest.approx(sum(v for (b, _), v in cells.items() if b == browser), abs=1e-9)
    by_sex = [n for *_, g, n in noisy if g == 2]
    assert [n for *_, g, n in noisy if g == 3] == [pytest.approx(sum(by_sex), abs=1e-9)]
    fresh = _connect(_one_key_per_user({"chrome": 300, "firefox": 200, "safari": 100, "lynx": 1}, rows_per_unit=2), _schema(m=4, max_groups_per_unit=2, max_rows_per_group=2))
    frame = fresh._session.backend.connection.execute('SELECT * FROM "__dpsql_logs"').df()  # type: ignore[attr-defined]
    with dpsql.testing.noise_disabled(), dpsql.testing.seeded(5):
        exact = fresh.cursor().execute(sql, epsilon=1.0).fetchall()
    truth = _exact(frame, "SELECT browser, sex, COUNT(*) FROM logs GROUP BY browser, sex")
    assert {(b, s): n for b, s, g, n in exact if g == 0} == pytest.approx({k: float(v) for k, v in truth.items() if k[0] != "lynx"})
    assert [n for *_, g, n in exact if g == 3] == [pytest.approx(len(frame))]


def test_explain_says_whether_a_columns_keys_are_selected_by_the_statement_or_released_earlier(adult_connection: dpsql.Connection) -> None:
    """Before any key of ``browser`` is released, EXPLAIN says this statement selects them (it showed "1 released key(s)":
    the placeholder of an empty key set); after, it counts the released keys."""
    cursor = adult_connection.cursor()
    sql = "SELECT browser, COUNT(*) FROM adult GROUP BY browser"
    columns = [r for r in cursor.execute("EXPLAIN " + sql).fetchall() if r[0] == "column" and r[1] == "browser"]
    assert columns == [("column", "browser", None, "no declared domain: its keys are selected privately by this statement (docs/glossary.md#selection)")]
    released = len(cursor.execute(sql, epsilon=1.0).fetchall())
    assert released >= 1
    columns = [r for r in cursor.execute("EXPLAIN SELECT browser, sex, COUNT(*) FROM adult GROUP BY browser, sex").fetchall() if r[0] == "column" and r[1] == "browser"]
    assert columns[0][3].startswith(f"{released} released key(s)")
