"""Joins in private aggregations (dpsql/joined_tables.py): every accepted form equals DuckDB's exact answer with the
noise off (after the same truncation, written out here in DuckDB), one person's removal moves the answers by at
most the bound EXPLAIN states, and the joins that are not through the unit or not on declared keys are refused
before anything is charged, with what to declare."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.pipeline
import dpsql.testing
from duckdb_answers import assert_cells_match, assert_same_rows, duckdb_rows
from test_grammar import assert_refused

PERSONS_SCHEMA = {"privacy_unit": "id", "columns": {"age": {"range": [0, 4]}, "sex": {"categories": ["F", "M"]}}}
VISITS_SCHEMA = {
    "privacy_unit": "person_id", "max_rows_per_unit": 50,
    "foreign_keys": {"person_id": "persons.id", "clinic_id": "clinics.id"},
    "columns": {"cost": {"range": [0, 40]}, "kind": {"categories": ["a", "b", "c"]}},
}
LABS_SCHEMA = {"privacy_unit": "person_id", "max_rows_per_unit": 20, "foreign_keys": {"person_id": "persons.id"}, "columns": {"value": {"range": [0, 9]}}}


def frames(persons: int = 120, seed: int = 7) -> dict[str, pd.DataFrame]:
    """Persons with 1–12 visits each (skewed), labs for some of them, 6 clinics in 3 regions of 2 zones."""
    rng = np.random.default_rng(seed)
    visits_per = np.minimum(rng.geometric(0.3, persons), 12)
    person = np.repeat(np.arange(persons), visits_per)
    labs_per = rng.integers(0, 4, persons)
    return {
        "persons": pd.DataFrame({"id": np.arange(persons), "age": rng.integers(0, 5, persons), "sex": rng.choice(["F", "M"], persons)}),
        "visits": pd.DataFrame({
            "person_id": person, "clinic_id": rng.integers(0, 6, person.size), "cost": rng.integers(0, 41, person.size),
            "kind": rng.choice(["a", "b", "c"], person.size),
        }),
        "labs": pd.DataFrame({"person_id": np.repeat(np.arange(persons), labs_per), "value": rng.integers(0, 10, labs_per.sum())}),
        "clinics": pd.DataFrame({"id": np.arange(6), "region": ["north", "south", "east", "north", "south", "east"]}),
        "regions": pd.DataFrame({"region": ["north", "south", "east"], "zone": [1, 1, 2]}),
    }


def connect(data: dict[str, pd.DataFrame], visits_schema: dict[str, object] = VISITS_SCHEMA) -> dpsql.Connection:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1000.0, delta=1e-6))
    connection.register("clinics", data["clinics"], public=True)
    connection.register("regions", data["regions"], public=True)
    connection.register("persons", data["persons"], schema=PERSONS_SCHEMA)
    connection.register("visits", data["visits"], schema=visits_schema)
    connection.register("labs", data["labs"], schema=LABS_SCHEMA)
    return connection


@pytest.fixture(scope="module")
def data() -> dict[str, pd.DataFrame]:
    return frames()


@pytest.fixture()
def joined(data: dict[str, pd.DataFrame]) -> dpsql.Connection:
    connection = connect(data)
    yield connection
    connection.close()


def released(connection: dpsql.Connection, sql: str) -> tuple[list[tuple], list[tuple]]:
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute(sql, epsilon=1.0)
    return cursor.fetchall(), cursor.errors


GRAMMAR = Path(__file__).resolve().parents[2] / "grammar"
ACCEPTED = sorted((GRAMMAR / "accepted" / "joins").glob("*.sql"))  # the join forms: the bounds hold every person's rows
REJECTED = sorted((GRAMMAR / "rejected" / "joins").glob("*.sql"))


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: p.stem)
def test_every_join_form_equals_duckdb_without_truncation(path: Path, data: dict[str, pd.DataFrame]) -> None:
    """The accepted join corpus: with the bounds above what anyone has, the answers are DuckDB's on the raw tables."""
    sql = path.read_text().strip()
    bounds = {**VISITS_SCHEMA, "max_rows_per_unit": 12}  # the most visits anyone has: nothing truncated
    connection = connect(data, bounds)
    rows, errors = released(connection, sql)
    _, exact = duckdb_rows(sql, data)
    if "GROUP BY" in sql:
        assert_cells_match(rows, errors, exact)
    else:
        assert_same_rows(rows, exact)
    assert connection.budget_spent().statements == 1
    connection.close()


def test_cube_and_a_shell_over_a_join(joined: dpsql.Connection, data: dict[str, pd.DataFrame]) -> None:
    connection = connect(data, {**VISITS_SCHEMA, "max_rows_per_unit": 12})
    cube = "SELECT c.region, p.sex, COUNT(*) AS n FROM visits v JOIN persons p ON v.person_id = p.id JOIN clinics c ON v.clinic_id = c.id GROUP BY CUBE (c.region, p.sex)"
    rows, errors = released(connection, cube)
    _, exact = duckdb_rows(cube, data)
    assert_same_rows(rows, exact)
    shell = ("SELECT region, n * 2 AS twice FROM (SELECT c.region, COUNT(*) AS n FROM visits v JOIN clinics c ON v.clinic_id = c.id "
             "GROUP BY c.region) AS t ORDER BY twice DESC LIMIT 2")
    rows, _ = released(connection, shell)
    _, exact = duckdb_rows(shell, data)
    assert_same_rows(rows, exact, ordered=True)
    connection.close()


def test_a_median_and_a_batch_over_a_join(data: dict[str, pd.DataFrame]) -> None:
    """Quantiles of a joined column, and a workload of statements over one join planned and charged together."""
    connection = connect(data, {**VISITS_SCHEMA, "max_rows_per_unit": 12})
    median = "SELECT c.region, MEDIAN(v.cost) AS m FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region"
    rows, errors = released(connection, median)
    assert_cells_match(rows, errors, duckdb_rows(median, data)[1])
    batch = [
        "SELECT c.region, COUNT(*) AS n FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region",
        "SELECT v.kind, COUNT(*) AS n FROM visits v JOIN clinics c ON v.clinic_id = c.id WHERE c.region = 'north' GROUP BY v.kind",
    ]
    with dpsql.testing.noise_disabled():
        results = connection.workload(batch, epsilon=1.0)
    for sql, result in zip(batch, results):
        assert_cells_match(result.rows, result.errors, duckdb_rows(sql, data)[1])
    assert connection.budget_spent().statements == 2  # the median, then the batch charged once
    connection.close()


def _truncated_visits(connection: dpsql.Connection, data: dict[str, pd.DataFrame], bound: int) -> pd.DataFrame:
    """visits kept by the salted rule, written out in DuckDB: each person's visits ranked by
    HASH(HASH(person_id, HASH(<every column>), salt)), the first ``bound`` kept."""
    salt = connection._session.tables["visits"].salt
    sql = (f"SELECT person_id, clinic_id, cost, kind FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY person_id ORDER BY "
           f"HASH(HASH(person_id, HASH(person_id, clinic_id, cost, kind), {salt}))) AS r FROM visits) WHERE r <= {bound}")
    return pd.DataFrame(duckdb_rows(sql, data)[1], columns=["person_id", "clinic_id", "cost", "kind"])


def test_private_join_public_counts_the_truncated_rows(data: dict[str, pd.DataFrame]) -> None:
    connection = connect(data, {**VISITS_SCHEMA, "max_rows_per_unit": 2})
    sql = "SELECT c.region, COUNT(*) AS n, SUM(v.cost) AS s FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region"
    rows, errors = released(connection, sql)
    kept = _truncated_visits(connection, data, 2)
    assert len(kept) < len(data["visits"])  # some persons lost visits
    _, exact = duckdb_rows(sql, {**data, "visits": kept})
    assert_cells_match(rows, errors, exact)
    connection.close()


def test_private_join_private_is_bounded_after_the_join(data: dict[str, pd.DataFrame]) -> None:
    """visits ⋈ labs along the unit: a person keeps at most 3 · 2 = 6 joined rows, chosen by the salted order of the
    joined rows (written out in DuckDB with the relation's salt and the joined row's identity)."""
    connection = connect(data, {**VISITS_SCHEMA, "max_rows_per_unit": 3})
    connection.register("labs", data["labs"], schema={**LABS_SCHEMA, "max_rows_per_unit": 2})
    sql = "SELECT v.kind, COUNT(*) AS n FROM visits v JOIN labs l ON v.person_id = l.person_id GROUP BY v.kind"
    rows, errors = released(connection, sql)
    relation = next(iter(connection._session.registrations.joined.values()))
    assert relation.schema.max_rows_per_unit == 6
    identity = 'HASH(v.person_id, v.clinic_id, v.cost, v.kind, l.person_id, l.value)'
    truth = (f"SELECT kind, COUNT(*) AS n FROM (SELECT v.kind, ROW_NUMBER() OVER (PARTITION BY v.person_id ORDER BY "
             f"HASH(HASH(v.person_id, {identity}, {relation.salt}))) AS r FROM visits v JOIN labs l ON v.person_id = l.person_id) "
             "WHERE r <= 6 GROUP BY kind")
    _, exact = duckdb_rows(truth, data)
    _, untruncated = duckdb_rows(sql, data)
    assert exact != untruncated  # the bound binds
    assert_cells_match(rows, errors, exact)
    connection.close()


def test_a_self_join_on_the_unit_counts_pairs_of_a_persons_visits(data: dict[str, pd.DataFrame]) -> None:
    connection = connect(data, {**VISITS_SCHEMA, "max_rows_per_unit": 12})
    sql = "SELECT COUNT(*) AS pairs FROM visits a JOIN visits b ON a.person_id = b.person_id WHERE a.kind = 'a' AND b.kind = 'b'"
    rows, _ = released(connection, sql)
    assert_same_rows(rows, duckdb_rows(sql, data)[1])
    assert "144" in str(connection.cursor().execute("EXPLAIN " + sql).fetchall())  # 12 · 12 pairs per person
    connection.close()


def _declared_fan_out(most: int) -> dict[str, object]:
    return {**VISITS_SCHEMA, "max_rows_per_unit": 12,
            "foreign_keys": {"person_id": "persons.id", "clinic_id": {"references": "clinics.id", "max_rows": most}}}


@pytest.mark.parametrize(
    ("schema", "bound", "said"),
    [({**VISITS_SCHEMA, "max_rows_per_unit": 12}, 24, "2 row(s) of clinics per key"), (_declared_fan_out(3), 36, "3 row(s) of clinics per key (declared)")],
    ids=["computed", "declared"],
)
def test_public_fan_out_enters_the_bound(data: dict[str, pd.DataFrame], schema: dict[str, object], bound: int, said: str) -> None:
    """A clinic listed under two names: each visit meets 2 rows of the public table, so a person adds 2 · m rows — or
    F · m with F declared on the key (``max_rows``: 3 here, above the table's 2). The answers are DuckDB's on the whole
    doubled table either way."""
    doubled = pd.concat([data["clinics"], data["clinics"].assign(region=data["clinics"].region + "-old")])
    connection = connect({**data, "clinics": doubled}, schema)
    sql = "SELECT c.region, COUNT(*) AS n FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region"
    rows, errors = released(connection, sql)
    assert_cells_match(rows, errors, duckdb_rows(sql, {**data, "clinics": doubled})[1])
    explained = [r for r in connection.cursor().execute("EXPLAIN " + sql).fetchall() if r[1] == "rows per unit"][0]
    assert explained[2] == bound and said in explained[3]
    connection.close()


def test_a_declared_fan_out_is_enforced_in_the_engine(data: dict[str, pd.DataFrame]) -> None:
    """A declared F = 1 over a table with 2 rows per key: one row per key is joined (the first in the order of the table's
    columns: the original region, before its "-old" copy), so the answers are DuckDB's on the original clinics and the
    bound stays m = 12 — the declaration holds whatever the table holds."""
    doubled = pd.concat([data["clinics"], data["clinics"].assign(region=data["clinics"].region + "-old")])
    connection = connect({**data, "clinics": doubled}, _declared_fan_out(1))
    sql = "SELECT c.region, COUNT(*) AS n FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region"
    rows, _ = released(connection, sql)
    exact = dict(duckdb_rows(sql, data)[1])
    assert {region: pytest.approx(exact.get(region, 0), abs=1e-6) for region, _ in rows} == dict(rows)  # "-old" regions: 0
    assert set(exact) < {region for region, _ in rows}
    bound = [r for r in connection.cursor().execute("EXPLAIN " + sql).fetchall() if r[1] == "rows per unit"][0]
    assert bound[2] == 12
    connection.close()


@pytest.mark.parametrize("most", [0, -1, 1.5, True, "2"])
def test_a_declared_fan_out_must_be_a_positive_integer(most: object) -> None:
    with pytest.raises(dpsql.ProgrammingError, match="max_rows must be a positive integer"):
        dpsql.schema.Schema.load(_declared_fan_out(most))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT p.age, COUNT(*) AS n, SUM(v.cost) AS s FROM visits v JOIN persons p ON v.person_id = p.id GROUP BY p.age",
        "SELECT c.region, COUNT(*) AS n FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region",
        "SELECT v.kind, COUNT(*) AS n FROM visits v JOIN labs l ON v.person_id = l.person_id GROUP BY v.kind",
    ],
)
def test_removing_one_person_with_all_their_rows_moves_the_counts_by_at_most_the_bound(sql: str) -> None:
    """Neighbouring data: the heaviest person and every row of theirs removed from every table. The released counts
    (noise off) move by at most the EXPLAINed rows per unit in L1 — and by exactly that person's kept rows."""
    data = frames(persons=60, seed=3)
    heaviest = int(data["visits"].person_id.value_counts().idxmax())
    neighbour = {**data, **{name: data[name][data[name][key] != heaviest] for name, key in (("persons", "id"), ("visits", "person_id"), ("labs", "person_id"))}}
    bound = {**VISITS_SCHEMA, "max_rows_per_unit": 4}
    answers, limit = [], None
    for tables in (data, neighbour):
        with dpsql.testing.seeded(11):  # the same bounding salts on both datasets: the one person is the only difference
            connection = connect(tables, bound)
        rows, _ = released(connection, sql)
        answers.append(np.array([row[1] for row in rows], dtype=float))
        limit = [r[2] for r in connection.cursor().execute("EXPLAIN " + sql).fetchall() if r[1] == "rows per unit"][0]
        connection.close()
    moved = np.abs(answers[0] - answers[1]).sum()
    assert 0 < moved <= limit, (moved, limit)


@pytest.mark.parametrize("path", REJECTED, ids=lambda p: p.stem)
def test_joins_not_through_the_unit_or_not_on_declared_keys_are_refused_free(joined: dpsql.Connection, path: Path) -> None:
    """The rejected join corpus: each refused before anything is read or charged, saying what to declare or write."""
    assert_refused(path, joined)
    assert joined.budget_spent().statements == 0


def test_private_tables_that_protect_different_units_are_not_joined(data: dict[str, pd.DataFrame]) -> None:
    connection = connect(data)
    connection.register("devices", pd.DataFrame({"owner": [0, 1], "model": ["x", "y"]}), schema={"privacy_unit": "owner"})
    with pytest.raises(dpsql.NotSupportedError, match=r"'visits' and 'devices' do not declare the same privacy unit; declare their unit columns as foreign keys"):
        connection.cursor().execute("SELECT COUNT(*) FROM visits v JOIN devices d ON v.person_id = d.owner", epsilon=1.0)
    assert connection.budget_spent().statements == 0
    connection.close()


def test_a_join_is_reused_and_forgotten_when_a_table_is_registered_again(joined: dpsql.Connection, data: dict[str, pd.DataFrame]) -> None:
    sql = "SELECT c.region, COUNT(*) AS n FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region"
    cursor = joined.cursor()
    first = cursor.execute(sql, epsilon=0.5).fetchall()
    assert cursor.execute(sql, epsilon=0.5).fetchall() == first and joined.budget_spent().statements == 1  # answered free
    joined.register("clinics", data["clinics"], public=True)
    cursor.execute(sql, epsilon=0.5)
    assert joined.budget_spent().statements == 2  # the relation changed: measured afresh
    assert cursor.execute("EXPLAIN " + sql).fetchall()[0][0] == "statement" and joined.budget_spent().statements == 2


def test_a_statement_chooses_its_bound_and_counts_the_rows_it_keeps(data: dict[str, pd.DataFrame]) -> None:
    """max_rows_per_unit: auto — with the noise off the bound is the one the exact histogram of persons by their visits'
    level chooses (computed here from the frame), and the answers are DuckDB's on the visits that bound keeps."""
    from planner import BoundChoice, bound_levels

    connection = connect(data, {**VISITS_SCHEMA, "max_rows_per_unit": {"auto": 16}})
    sql = "SELECT c.region, COUNT(*) AS n, SUM(v.cost) AS s FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region"
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        rows = cursor.execute(sql, epsilon=1.0).fetchall()
    chosen = next(iter(connection._session.registrations.joined.values()))
    prepared_choice = dpsql.pipeline.prepare(connection._session, dpsql.pipeline.execute_request(connection._session, sql, None, 1.0, None, None)).chosen
    visits_per_person = data["visits"].person_id.value_counts().to_numpy()
    bounds = bound_levels(16)  # 1, 2, 3, 4, 6, 8, 11, 16: a person's level is that of their last visit
    levels = np.minimum(np.searchsorted(bounds, visits_per_person), len(bounds) - 1)
    histogram = np.bincount(levels, minlength=len(bounds))
    expected = BoundChoice(prepared_choice.choice.privacy, prepared_choice.choice.truncations, prepared_choice.choice.penalty).choose(histogram, noise=False)
    assert f"rows per unit chosen: {expected} " in cursor.explanation and chosen.schema.choose_bound
    assert expected < 12  # some persons lose visits: the truncation is exercised
    kept = _truncated_visits(connection, data, expected)
    assert_cells_match(rows, cursor.errors, duckdb_rows(sql, {**data, "visits": kept})[1])
    explained = [r for r in connection.cursor().execute("EXPLAIN " + sql).fetchall() if r[1] == "rows per unit"][0]
    assert "chosen privately among 1, 2, 3, 4, … up to 16" in explained[3]
    with pytest.raises(dpsql.NotSupportedError, match="whose max_rows_per_unit is auto, is not supported: declare a bound"):
        connection.cursor().execute("SELECT COUNT(DISTINCT v.person_id) FROM visits v JOIN clinics c ON v.clinic_id = c.id", epsilon=1.0)
    assert connection.budget_spent().statements == 1
    connection.close()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT v.drug, COUNT(*) AS n FROM visits v JOIN clinics c ON v.clinic_id = c.id WHERE c.region <> 'east' GROUP BY v.drug",
        "SELECT v.drug, p.sex, COUNT(*) AS n FROM visits v JOIN persons p ON v.person_id = p.id GROUP BY v.drug, p.sex",
    ],
    ids=["private-public", "private-private"],
)
def test_unknown_keys_over_a_join_are_selected_and_counted_exactly(sql: str) -> None:
    """GROUP BY a joined column with no declared domain: keys are selected privately over the joined relation. With the
    noise off, the released keys are exactly those whose total (over the key's cells) reaches the EXPLAINed threshold —
    "a" (600 rows), "b" (400), "c" (200) but not "d" (20) or "z" (2) — and each released count is DuckDB's exact answer
    (the bounds keep every row: 2 visits per person, all of one drug)."""
    sizes = {"a": 300, "b": 200, "c": 100, "d": 10, "z": 1}
    rng = np.random.default_rng(2)
    drug = np.repeat(list(sizes), list(sizes.values()))
    tables = {
        "persons": pd.DataFrame({"id": np.arange(drug.size), "age": rng.integers(0, 5, drug.size), "sex": rng.choice(["F", "M"], drug.size)}),
        "visits": pd.DataFrame({"person_id": np.repeat(np.arange(drug.size), 2), "drug": np.repeat(drug, 2).astype(object),
                                "clinic_id": rng.integers(0, 6, 2 * drug.size), "cost": 1, "kind": "a"}),
        "clinics": pd.DataFrame({"id": np.arange(6), "region": ["north", "south", "east"] * 2}),
    }
    schema = {**VISITS_SCHEMA, "max_rows_per_unit": 2, "max_groups_per_unit": 1, "max_rows_per_group": 2,
              "columns": {**VISITS_SCHEMA["columns"], "drug": "unknown"}}  # type: ignore[dict-item]
    connection = connect({**frames(), **tables}, schema)
    explained = {(r[0], r[1]): r[2] for r in connection.cursor().execute("EXPLAIN " + sql, epsilon=1.0).fetchall()}
    threshold = explained["selection", "threshold"]
    with dpsql.testing.seeded(1):
        rows, _ = released(connection, sql)
    _, exact = duckdb_rows(sql, tables)
    totals: dict[object, float] = {}
    for row in exact:
        totals[row[0]] = totals.get(row[0], 0) + row[-1]
    kept = {k for k, total in totals.items() if total >= threshold}
    assert kept == {"a", "b", "c"} and 20 < threshold < 200
    assert {r[:-1]: r[-1] for r in rows} == {r[:-1]: pytest.approx(r[-1], abs=1e-9) for r in exact if r[0] in kept}
    connection.close()
