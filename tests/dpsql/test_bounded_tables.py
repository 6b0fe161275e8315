"""Each registered table's bounded rows are read inline by its first charged statement and computed once,
inside the second one's read, and kept in the backend (dpsql/bounded_tables.py): exact counts equal an
independent reference, inline and kept reads count the same rows, every statement counts the same kept
rows, a new registration drops and recomputes them, nothing is computed before a charge, and a backend
that cannot keep them gets the same answers from a subquery."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

from recording_backend import RecordingBackend

import dpsql
import dpsql.testing
from dpsql.backends.duckdb import DuckDBBackend

BOUND = 2
SCHEMA = {
    "privacy_unit": "pid",
    "max_rows_per_unit": BOUND,
    "columns": {"slot": {"range": [0, 5]}, "tag": {"categories": ["a", "b", "c"]}},
}


def visits(seed: int = 3, units: int = 400) -> pd.DataFrame:
    """Units of 1-6 rows (most over the bound of 2), and a few rows outside the declared domains."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 7, size=units)
    frame = pd.DataFrame({
        "pid": np.repeat(np.arange(units), sizes),
        "slot": rng.integers(0, 6, size=sizes.sum()),
        "tag": rng.choice(["a", "b", "c"], size=sizes.sum()),
    })
    frame.loc[::37, "slot"] = 9  # outside the range: dropped before bounding
    frame.loc[::41, "tag"] = "z"  # outside the categories: dropped before bounding
    return frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def exact(connection: dpsql.Connection, sql: str) -> dict[tuple, float]:
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute(sql, epsilon=1.0).fetchall()
    return {tuple(row[:-1]): round(row[-1], 6) for row in rows}


def kept_relations(database: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in database.execute("SELECT table_name FROM duckdb_tables() WHERE temporary AND table_name LIKE '__dpsql_bounded_%'").fetchall()]


def reference_rows(database: duckdb.DuckDBPyConnection, salt: int) -> pd.DataFrame:
    """The bounded rows written by hand: in-domain rows, ranked per unit by the salted hash of the unit and
    the row's identity (a hash of all its columns), the first BOUND kept."""
    return database.execute(
        f"SELECT slot, tag FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY pid ORDER BY HASH(HASH(pid, HASH(pid, slot, tag), {salt}))) AS r "
        f"FROM t WHERE slot BETWEEN 0 AND 5 AND tag IN ('a', 'b', 'c') AND pid IS NOT NULL) WHERE r <= {BOUND}"
    ).df()


@pytest.fixture
def database() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    connection.register("t", visits())
    return connection


def test_statements_count_the_kept_rows_of_an_independent_reference(database: duckdb.DuckDBPyConnection) -> None:
    """Different GROUP BY and WHERE clauses, noise off: each answer equals the same hand-written bounded rows'
    count, and the rows were bounded once (one creation, read by every statement)."""
    backend = RecordingBackend(database)
    connection = dpsql.connect(backend, budget=dpsql.Budget(1000.0), reuse=False)
    with dpsql.testing.seeded(17):
        connection.register("t", None, schema=SCHEMA)
    salt = connection._session.tables["t"].salt
    rows = reference_rows(database, salt)
    frame = visits()
    assert len(rows) < len(frame[(frame.slot <= 5) & (frame.tag != "z")])  # bounding dropped rows
    by_slot_tag = rows.groupby(["slot", "tag"]).size()
    assert exact(connection, "SELECT slot, tag, COUNT(*) FROM t GROUP BY slot, tag") == {
        (s, g): float(by_slot_tag.get((s, g), 0)) for s in range(6) for g in "abc"
    }
    assert exact(connection, "SELECT tag, COUNT(*) FROM t WHERE slot >= 3 GROUP BY tag") == {
        (g,): float(((rows.slot >= 3) & (rows.tag == g)).sum()) for g in "abc"
    }
    assert exact(connection, "SELECT COUNT(*) FROM t WHERE tag = 'b' OR slot = 0") == {(): float(((rows.tag == "b") | (rows.slot == 0)).sum())}
    assert exact(connection, "SELECT slot, COUNT(*) FROM t GROUP BY ROLLUP (slot)")[(None,)] == float(len(rows))
    inline, created, *later = backend.statements
    assert "ROW_NUMBER" in inline.upper() and "__DPSQL_THRESHOLDS" not in inline.upper()  # the first: bounding fused in
    assert "__DPSQL_THRESHOLDS" in created.upper()  # kept once, by the second statement's read
    assert len(later) == 3 and all("ROW_NUMBER" not in s.upper() for s in later)  # the others read the kept rows


def test_statements_agree_on_the_same_kept_rows(database: duckdb.DuckDBPyConnection) -> None:
    """A filtered statement counts exactly the kept rows that pass its WHERE clause, so filtered counts add
    up to the unfiltered ones (with the WHERE applied before bounding they would not)."""
    connection = dpsql.connect(database, budget=dpsql.Budget(1000.0), reuse=False)
    connection.register("t", None, schema=SCHEMA)
    by_slot = exact(connection, "SELECT slot, COUNT(*) FROM t GROUP BY slot")
    for slot in range(6):
        assert exact(connection, f"SELECT COUNT(*) FROM t WHERE slot = {slot}") == {(): by_slot[(slot,)]}
    low = exact(connection, "SELECT tag, COUNT(*) FROM t WHERE slot < 3 GROUP BY tag")
    high = exact(connection, "SELECT tag, COUNT(*) FROM t WHERE slot >= 3 GROUP BY tag")
    assert sum(low.values()) + sum(high.values()) == sum(by_slot.values())


def test_a_new_registration_drops_and_recomputes_the_kept_rows(database: duckdb.DuckDBPyConnection) -> None:
    connection = dpsql.connect(database, budget=dpsql.Budget(1000.0), reuse=False)
    sql = "SELECT slot, tag, COUNT(*) FROM t GROUP BY slot, tag"
    answers, relations = [], []
    for seed in (5, 5, 6):
        with dpsql.testing.seeded(seed):
            connection.register("t", None, schema=SCHEMA)  # the same data, a salt from the seed
        assert kept_relations(database) == []  # the previous registration's rows were dropped
        answers.append(exact(connection, sql))  # read inline: nothing kept yet
        assert kept_relations(database) == [] and exact(connection, sql) == answers[-1]  # kept now: the same rows
        (relation,) = kept_relations(database)
        relations.append(relation)
    assert len(set(relations)) == 3  # a fresh relation per registration
    assert answers[0] == answers[1] and answers[0] != answers[2]  # the same salt keeps the same rows, another salt others
    assert sum(answers[0].values()) == sum(answers[2].values())  # as many rows either way: min(rows, bound) per unit
    connection.register("other", visits(seed=4), schema=SCHEMA)
    exact(connection, "SELECT COUNT(*) FROM other")
    exact(connection, "SELECT COUNT(*) FROM other")
    assert len(kept_relations(database)) == 2  # one per registered table
    connection.close()
    assert kept_relations(database) == []  # closing drops them (the database is the caller's: still open)


def test_nothing_is_computed_before_a_charge(database: duckdb.DuckDBPyConnection) -> None:
    """Registering (a probe that reads no table), EXPLAIN and refused statements compute nothing."""
    backend = RecordingBackend(database)
    connection = dpsql.connect(backend, budget=dpsql.Budget(1.0))
    connection.register("t", None, schema=SCHEMA)
    connection.cursor().execute("EXPLAIN SELECT slot, COUNT(*) FROM t GROUP BY slot")
    with pytest.raises(dpsql.BudgetExceededError, match="would spend more"):
        connection.cursor().execute("SELECT slot, COUNT(*) FROM t GROUP BY slot", epsilon=2.0)
    with pytest.raises(dpsql.DataError):
        connection.cursor().execute("SELECT slot, COUNT(*) FROM t WHERE tag = 'z' GROUP BY slot", epsilon=0.5)
    assert backend.statements == [] and kept_relations(database) == []
    connection.cursor().execute("SELECT slot, COUNT(*) FROM t GROUP BY slot", epsilon=0.25)
    assert len(backend.statements) == 1 and kept_relations(database) == [] and connection.budget_spent().statements == 1
    connection.cursor().execute("SELECT tag, COUNT(*) FROM t GROUP BY tag", epsilon=0.25)
    assert len(kept_relations(database)) == 1 and connection.budget_spent().statements == 2


class FailingOnce(DuckDBBackend):
    """Its first attempt to keep a relation fails as an engine would (out of memory, say)."""

    def __init__(self, database: duckdb.DuckDBPyConnection) -> None:
        super().__init__(database)
        self.failures = 1

    def create_temporary(self, name: str, query: str) -> None:
        if query.upper().startswith("SELECT 1"):  # the probe at register()
            return super().create_temporary(name, query)
        if self.failures:
            self.failures -= 1
            raise dpsql.OperationalError("out of memory while keeping row (3, 'b')")
        super().create_temporary(name, query)


def test_a_failed_computation_is_charged_withheld_and_retried(database: duckdb.DuckDBPyConnection) -> None:
    connection = dpsql.connect(FailingOnce(database), budget=dpsql.Budget(10.0))
    connection.register("t", None, schema=SCHEMA)
    connection.cursor().execute("SELECT slot, COUNT(*) FROM t GROUP BY slot", epsilon=1.0)  # inline: nothing to keep
    with pytest.raises(dpsql.OperationalError, match="withheld") as failed:
        connection.cursor().execute("SELECT tag, COUNT(*) FROM t GROUP BY tag", epsilon=1.0)
    assert "(3, 'b')" not in str(failed.value)
    assert connection.budget_spent().statements == 2  # the read had begun: charged
    assert kept_relations(database) == []
    connection.cursor().execute("SELECT slot, tag, COUNT(*) FROM t GROUP BY slot, tag", epsilon=1.0)  # tries again
    assert len(kept_relations(database)) == 1


class WithoutTemporaryTables(DuckDBBackend):
    """A backend that cannot keep relations (a custom one, or no temporary-table privilege)."""

    def create_temporary(self, name: str, query: str) -> None:
        raise dpsql.OperationalError("permission denied to create temporary tables")


def test_a_backend_that_cannot_keep_rows_gives_the_same_answers(database: duckdb.DuckDBPyConnection) -> None:
    answers = []
    for backend in (DuckDBBackend(database), WithoutTemporaryTables(database)):
        connection = dpsql.connect(backend, budget=dpsql.Budget(1000.0), reuse=False)
        with dpsql.testing.seeded(23):
            connection.register("t", None, schema=SCHEMA)
        answers.append([exact(connection, sql) for sql in (
            "SELECT slot, tag, COUNT(*) FROM t GROUP BY slot, tag",
            "SELECT tag, COUNT(*) FROM t WHERE slot BETWEEN 1 AND 4 GROUP BY tag",
        )])
        kept = connection._session.bounded.relation(connection._session.tables["t"])
        assert (kept is None) == isinstance(backend, WithoutTemporaryTables)  # inlined only where nothing can be kept
        connection.close()
    assert answers[0] == answers[1]
    assert kept_relations(database) == []


@pytest.mark.parametrize("first", ["SELECT COUNT(*) FROM t", "SELECT SUM(p) FROM t"])
def test_a_count_over_a_table_of_bounded_values_only_reads(first: str) -> None:
    """A schema whose only column has bounds (no domain to test or count by): the rows' cells have no
    column, and the read once sent ``SELECT FROM …`` — a parser error after the charge, every time."""
    frame = pd.DataFrame({"pid": np.repeat(np.arange(50), 3), "p": np.linspace(0, 1, 150)})
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0))
    connection.register("t", frame, schema={"privacy_unit": "pid", "max_rows_per_unit": 2, "columns": {"p": {"bounds": [0, 1]}}})
    with dpsql.testing.noise_disabled():
        for sql in (first, "SELECT COUNT(*) FROM t"):
            connection.execute(sql, epsilon=1.0)
        assert connection.execute("SELECT COUNT(*) FROM t", epsilon=1.0).fetchone()[0] == pytest.approx(100.0)


class _SlowFirstBackend:
    """Keeps relations by name only; creating the first one waits until told to go on."""

    dialect = "duckdb"

    def __init__(self) -> None:
        import threading

        self.started, self.go_on = threading.Event(), threading.Event()
        self.created: list[str] = []
        self._first: str | None = None

    def create_temporary(self, name: str, query: str) -> None:
        if name.startswith("__dpsql_bounded_") and self._first in (None, name):
            self._first = name
            self.started.set()
            assert self.go_on.wait(10)
        self.created.append(name)

    def drop_temporary(self, name: str) -> None:
        pass


def test_computing_one_tables_rows_does_not_hold_up_another_table() -> None:
    """The first charged read of a large table kept every other table's reads waiting (one lock for all)."""
    import threading

    from dpsql.bounded_tables import BoundedTables

    connection = dpsql.connect(budget=dpsql.Budget(1.0))
    for name in ("big", "small"):
        connection.register(name, visits(), schema=SCHEMA)
    big, small = (connection._session.table(name) for name in ("big", "small"))
    backend = _SlowFirstBackend()
    kept = BoundedTables(backend)  # type: ignore[arg-type]
    kept.register(big, None)
    kept.register(small, None)
    slow = threading.Thread(target=kept.ensure, args=(big,))
    slow.start()
    assert backend.started.wait(10)
    kept.ensure(small)  # before the fix: blocked until the big table's rows were computed
    assert len(backend.created) == 2  # the probe and the small table's rows
    backend.go_on.set()
    slow.join(10)
    assert len(backend.created) == 3 and not slow.is_alive()
