"""What the connections of one ``dpsql serve`` share: every session reads the server's one registration of
a table and its one kept relation of bounded rows, computed by the first charged read of any session —
never by Describe, EXPLAIN or a refused statement; an analyst's connections charge one ledger object,
whose charges commit in groups, so 64 statements racing for one budget spend exactly it, and no read of
private rows starts before its statement's charge is durable."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import duckdb
import psycopg
import pytest
import yaml

import dpsql.testing
from dpsql import bounded_tables
from dpsql.accountant import Ledger
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.serve import Server
from concurrency_helpers import at_once
from serve_helpers import ANALYSTS, dsn, exact, running, write_config

COUNT_BY_SEX = "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex"


def kept_relations(server: Server) -> list[str]:
    """The kept bounded relations in the server's DuckDB database (seen from a connection of its own)."""
    database = server._service.tables._server_db.cursor()  # type: ignore[union-attr]
    try:
        query = "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE '__dpsql_bounded_%'"
        return [row[0] for row in database.execute(query).fetchall()]
    finally:
        database.close()


async def described(server: Server, user: str) -> list[str]:
    """The columns of a statement as asyncpg learns them: Parse and Describe, never Execute."""
    import asyncpg

    host, port = server.address  # type: ignore[misc]
    connection = await asyncpg.connect(host=host, port=port, user=user, password=ANALYSTS[user][0], database="dpsql")
    try:
        statement = await connection.prepare("SELECT sex, COUNT(*) AS n FROM adult WHERE age > $1 GROUP BY sex /* dpsql: epsilon=0.5 */")
        return [attribute.name for attribute in statement.get_attributes()]
    finally:
        await connection.close()


def test_the_bounded_rows_are_computed_once_per_server_by_a_charged_read(
    tmp_path: Path, adult_schema: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old server computed and kept the bounded rows once per client connection (4 here, ~6.5 MiB each
    on the demo table): now the first charged read of any session computes them, once, for all."""
    from conftest import make_adult

    frame = make_adult(persons=300, seed=5)
    computed: list[str] = []
    original = bounded_tables.bounded_rows
    monkeypatch.setattr(bounded_tables, "bounded_rows", lambda *arguments, **options: computed.append("rows") or original(*arguments, **options))
    users = ("alice", "bob", "carol", "alice")
    with running(write_config(tmp_path, frame, adult_schema)) as server:
        connections = [psycopg.connect(dsn(server, user), autocommit=True) for user in users]
        for number, (user, connection) in enumerate(zip(users, connections)):
            assert asyncio.run(described(server, user)) == ["sex", "n"]
            connection.execute("EXPLAIN SELECT race, COUNT(*) FROM adult GROUP BY race /* dpsql: epsilon=0.5 */").fetchall()
            for refused, code in (("SELECT * FROM adult", "0A000"), ("SELECT COUNT(*) FROM adult /* dpsql: epsilon=900 */", "53Z01")):
                with pytest.raises(psycopg.Error) as raised:
                    connection.execute(refused)
                assert raised.value.sqlstate == code, number
        assert computed == [] and kept_relations(server) == []
        with dpsql.testing.noise_disabled():
            answers = at_once(len(users), lambda index: connections[index].execute(f"{COUNT_BY_SEX} /* dpsql: epsilon=0.25 */").fetchall(), psycopg.Error)
        assert computed == ["rows"] and len(kept_relations(server)) == 1
        truth = exact(frame, "SELECT sex, COUNT(*) FROM adult GROUP BY sex")
        assert all(sorted(rows) == sorted((sex, float(n)) for sex, n in truth) for rows in answers)  # type: ignore[arg-type]
        for connection in connections:
            connection.close()
        assert len(kept_relations(server)) == 1  # the server's, not a connection's: it outlives them


def test_a_duckdb_file_table_is_shared_too(tmp_path: Path, adult_schema: dict[str, object]) -> None:
    """A DuckDB database file is attached read-only to the server's database: its table is registered once
    and its bounded rows kept once, like a loaded file's."""
    from conftest import make_adult

    frame = make_adult(persons=200, seed=9)
    warehouse = duckdb.connect(str(tmp_path / "warehouse.duckdb"))
    warehouse.register("frame", frame)
    warehouse.execute("CREATE TABLE adult_2024 AS SELECT * FROM frame")
    warehouse.close()
    config = write_config(tmp_path, frame, adult_schema)
    document = yaml.safe_load(config.read_text())
    document["tables"] = {"adult": {"source": "warehouse.duckdb", "table": "adult_2024", "schema": "adult.yaml"}}
    config.write_text(yaml.safe_dump(document))
    truth = exact(frame, "SELECT sex, COUNT(*) FROM adult GROUP BY sex")
    with running(config) as server, dpsql.testing.noise_disabled():
        for user in ("alice", "bob"):
            with psycopg.connect(dsn(server, user), autocommit=True) as connection:
                rows = connection.execute(f"{COUNT_BY_SEX} /* dpsql: epsilon=0.25 */").fetchall()
                assert sorted(rows) == sorted((sex, float(n)) for sex, n in truth)
        assert len(kept_relations(server)) == 1


@pytest.mark.parametrize(("clients", "broken"), [(64, False), (8, True)])
def test_racing_statements_spend_exactly_the_budget_and_read_only_after_their_charge(
    tmp_path: Path, adult_schema: dict[str, object], monkeypatch: pytest.MonkeyPatch, clients: int, broken: bool
) -> None:
    """64 of bob's connections send a statement of ε = 3/32 at once against his budget of 3.0, eight
    running at a time (their charges commit in groups): exactly 32 are answered and charged, 32 refused
    (53Z01), the ledger holds exactly 3.0; and whenever a read of private rows starts (the bounded rows kept,
    or the aggregation), the ledger file already holds a committed charge for it and for every read before.
    The deliberately broken variant — a charge that returns before its commit — is caught by that check."""
    from conftest import make_adult

    config = write_config(tmp_path, make_adult(persons=200, seed=6), adult_schema, workers=8,
                          limits={"statements_per_analyst": 8, "connections": 100})
    ledger = tmp_path / "ledgers" / "bob.ledger"
    early: list[tuple[int, int]] = []  # (reads started, charges committed) where the second is smaller
    lock = threading.Lock()

    def committed() -> int:
        with sqlite3.connect(ledger) as observer:  # sees committed transactions only
            return int(observer.execute("SELECT COUNT(*) FROM charges").fetchone()[0])

    def watched(method: Callable[..., object], counts: bool) -> Callable[..., object]:
        def read(self: DuckDBBackend, *arguments: object) -> object:
            with lock:
                reads = len(started) + 1
                if counts:
                    started.append(1)
                found = committed()
                if found < reads:
                    early.append((reads, found))
            return method(self, *arguments)
        return read

    started: list[int] = []
    with running(config) as server:
        connections = [psycopg.connect(dsn(server, "bob"), autocommit=True) for _ in range(clients)]
        for connection in connections:
            connection.execute("SET dpsql.epsilon = 0.09375")  # 3/32, exact in binary
        monkeypatch.setattr(DuckDBBackend, "run", watched(DuckDBBackend.run, counts=True))  # from here on every run is a read
        for keeps in ("create_shared", "create_temporary"):  # the bounded rows kept: a read of private rows too
            if hasattr(DuckDBBackend, keeps):
                monkeypatch.setattr(DuckDBBackend, keeps, watched(getattr(DuckDBBackend, keeps), counts=False))
        charge, charging = Ledger.charge, set()
        if broken:
            monkeypatch.setattr(Ledger, "charge", lambda self, cost, text: threading.Timer(0.3, charge, (self, cost, text)).start() or 0)
        else:
            monkeypatch.setattr(Ledger, "charge", lambda self, cost, text: charging.add(id(self)) or charge(self, cost, text))
        outcomes = [o.sqlstate if isinstance(o, psycopg.Error) else o for o in at_once(
            clients, lambda index: connections[index].execute(f"SELECT COUNT(*) FROM adult WHERE age > {17 + index}").fetchall(), psycopg.Error
        )]
        for connection in connections:
            connection.close()
        if broken:
            assert early  # a read started before its charge was committed
            threading.Event().wait(1.0)  # the late charges finish before the server stops
            return
        assert early == []
        assert len(charging) == 1  # one ledger object for all of bob's connections (the old server: one each)
        assert sum(isinstance(o, list) for o in outcomes) == 32 and outcomes.count("53Z01") == 32
    with sqlite3.connect(ledger) as database:
        assert database.execute("SELECT COUNT(*), SUM(epsilon) FROM charges").fetchone() == (32, 3.0)
