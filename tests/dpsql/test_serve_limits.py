"""No analyst stalls another: slow statements run off the event loop, within a time limit and an
analyst's share of the pool, stopped uncharged by the limit, a CancelRequest or shutdown; connections
are capped, logins time out and failed ones slow down; a multi-statement string is checked in full
before any of it runs; a malformed message ends its connection with FATAL 08P01."""

from __future__ import annotations

import itertools
import os
import select
import socket
import sqlite3
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from dpsql import pipeline
from dpsql.serve import Server
from serve_helpers import dsn, running, write_config

_TEXTS = itertools.count()


SLOW_MARK = "age <> 91"  # a statement whose WHERE says this is held in prepare (the fixture below)
SLOW_SECONDS = 3.0


def slow(grouped: bool = False) -> str:
    """A statement that takes seconds to prepare (held there by :func:`_slow_prepare`: the front end is linear-time,
    so no text of a sensible size is slow on its own), its text new each time (parsed texts and plans are kept,
    in-process and per analyst)."""
    age = 17 + next(_TEXTS) % 70
    return f"SELECT {'sex, ' if grouped else ''}COUNT(*) FROM adult WHERE {SLOW_MARK} AND age <> {age}{' GROUP BY sex' if grouped else ''}"


@pytest.fixture(autouse=True)
def _slow_prepare(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prepare's compile stage sleeps :data:`SLOW_SECONDS` for a :func:`slow` statement: a statement still in
    prepare, uncharged, when the time limit, a cancel or a shutdown comes."""

    def held(stage):  # type: ignore[no-untyped-def]
        def run(session, draft):  # type: ignore[no-untyped-def]
            if SLOW_MARK in draft.request.text:
                time.sleep(SLOW_SECONDS)
            return stage(session, draft)

        return run

    monkeypatch.setattr(pipeline, "PREPARE_STAGES", tuple((name, held(stage) if name == "compile" else stage) for name, stage in pipeline.PREPARE_STAGES))
LIMITS = {"statement_seconds": 30, "connections": 8, "login_seconds": 0.5, "statements_per_analyst": 2}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, adult_schema: dict[str, object]) -> Iterator[Server]:
    from conftest import make_adult

    directory = tmp_path_factory.mktemp("limits")
    with running(write_config(directory, make_adult(persons=300, seed=4), adult_schema, limits=LIMITS)) as started:
        yield started


def budget(connection: psycopg.Connection) -> float:
    return float(connection.execute("SHOW dpsql.budget").fetchone()[0])  # type: ignore[index]


def simple(connection: psycopg.Connection, sql: str) -> list[tuple[str, str | None, int]]:
    """``sql`` as one simple-protocol Query message: per result, its status, SQLSTATE and row count."""
    pgconn = connection.pgconn
    pgconn.send_query(sql.encode())
    pgconn.flush()
    results = []
    while True:
        while pgconn.is_busy():  # wait without holding the GIL (the server runs in this process)
            select.select([pgconn.socket], [], [], 1.0)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            break
        code = result.error_field(psycopg.pq.DiagnosticField.SQLSTATE)
        results.append((psycopg.pq.ExecStatus(result.status).name, None if code is None else code.decode(), result.ntuples))
    return results


def charges(server: Server, ledger: str) -> int:
    with sqlite3.connect(Path(server.config.ledgers) / f"{ledger}.ledger") as database:  # type: ignore[arg-type]
        return int(database.execute("SELECT COUNT(*) FROM charges").fetchone()[0])


def test_a_statement_over_its_time_limit_is_stopped_uncharged_and_others_are_not_stalled(tmp_path: Path, adult_schema: dict[str, object]) -> None:
    from conftest import make_adult

    with running(write_config(tmp_path, make_adult(persons=100, seed=4), adult_schema, limits={"statement_seconds": 0.1})) as server:
        _time_limit(server)


def _time_limit(server: Server) -> None:
    latencies: list[float] = []
    spent = charges(server, "alice")
    with psycopg.connect(dsn(server, "bob"), autocommit=True) as bystander, psycopg.connect(dsn(server, "alice"), autocommit=True) as slow_connection:
        finished = threading.Event()

        def watch() -> None:
            while not finished.is_set():
                started = time.monotonic()
                bystander.execute("SHOW dpsql.epsilon").fetchall()
                latencies.append(time.monotonic() - started)
                time.sleep(0.01)

        watcher = threading.Thread(target=watch)
        watcher.start()
        started = time.monotonic()
        assert simple(slow_connection, slow()) == [("FATAL_ERROR", "57014", 0)]  # the simple protocol: its text is split on the server
        stopped_after = time.monotonic() - started
        finished.set()
        watcher.join()
        assert stopped_after < 1.2  # the time limit (0.1 s), not the statement's own seconds
        assert max(latencies) < 1.0  # SHOW kept being answered while the statement was parsed and prepared
    assert charges(server, "alice") == spent


def test_a_heavy_catalog_query_does_not_stall_another_analyst(server: Server) -> None:
    heavy = "SELECT COUNT(*) FROM pg_type a, pg_type b, pg_type c, pg_type d, pg_type e"  # 50^5 rows
    latencies: list[float] = []
    with psycopg.connect(dsn(server, "bob"), autocommit=True) as bystander, psycopg.connect(dsn(server, "carol"), autocommit=True) as browsing:
        outcome: list[object] = []
        worker = threading.Thread(target=lambda: outcome.append(_outcome(lambda: browsing.execute(heavy).fetchall())), daemon=True)
        worker.start()
        while worker.is_alive() and len(latencies) < 200:
            started = time.monotonic()
            bystander.execute("SHOW dpsql.epsilon").fetchall()
            latencies.append(time.monotonic() - started)
        worker.join(timeout=15)
    assert outcome and outcome[0] in ([(312500000,)], "57014")  # answered, or stopped at the catalog's time limit
    assert max(latencies) < 1.0


def _outcome(call: object) -> object:
    try:
        return call()  # type: ignore[operator]
    except psycopg.Error as error:
        return error.sqlstate


def test_a_cancel_request_before_the_charge_stops_the_statement_uncharged(server: Server) -> None:
    spent = charges(server, "alice")
    with psycopg.connect(dsn(server, "alice"), autocommit=True) as connection:
        before = budget(connection)
        outcome: list[BaseException] = []

        def run() -> None:
            try:
                connection.execute(slow(grouped=True))
            except psycopg.Error as error:
                outcome.append(error)

        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(0.1)
        connection.cancel_safe()
        worker.join()
        assert len(outcome) == 1 and isinstance(outcome[0], psycopg.errors.QueryCanceled)
        assert "user request; nothing was charged" in str(outcome[0])
        assert budget(connection) == before
    assert charges(server, "alice") == spent


def test_connections_beyond_the_cap_are_refused_and_silent_ones_time_out(server: Server) -> None:
    host, port = server.address  # type: ignore[misc]
    silent = [socket.create_connection((host, port), timeout=15) for _ in range(8)]
    try:
        with pytest.raises(psycopg.OperationalError, match="too many connections"):
            psycopg.connect(dsn(server, "bob"))
        started = time.monotonic()
        for raw in silent:  # never logged in: each closed after the login time limit
            assert raw.recv(4096) == b""
        assert time.monotonic() - started < 10.0  # 0.5 s each, stretched by a loaded machine; never held (75 s before)
    finally:
        for raw in silent:
            raw.close()
    with psycopg.connect(dsn(server, "bob"), autocommit=True) as connection:  # room again
        assert connection.execute("SHOW dpsql.budget").fetchone() == (3.0, 0.0, 0.0)


def test_failed_logins_slow_down_further_attempts(tmp_path: Path, adult_schema: dict[str, object]) -> None:
    from conftest import make_adult

    durations = []
    with running(write_config(tmp_path, make_adult(persons=50, seed=4), adult_schema)) as server:
        for _ in range(5):
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
                psycopg.connect(dsn(server, "dave", password="wrong"))
            durations.append(time.monotonic() - started)
    assert durations[-1] > 0.7  # after 4 failures in a row the next attempt waits 0.8 s
    assert sum(durations) > 1.4


def test_a_multi_statement_string_is_checked_in_full_before_any_of_it_runs(server: Server) -> None:
    spent = charges(server, "alice")
    with psycopg.connect(dsn(server, "alice"), autocommit=True) as connection:
        assert simple(connection, "SELECT sex, COUNT(*) FROM adult GROUP BY sex; SELECT * FROM adult") == [("FATAL_ERROR", "0A000", 0)]
        # a SET refused in the string: nothing ran either
        assert simple(connection, "SELECT sex, COUNT(*) FROM adult WHERE age > 20 GROUP BY sex; SET dpsql.epsilon = 1e308") == [
            ("FATAL_ERROR", "22023", 0)]
        both = "/* dpsql: epsilon=3 */ SELECT COUNT(*) FROM adult; /* dpsql: epsilon=3 */ SELECT COUNT(*) FROM adult WHERE age > 30"
        assert simple(connection, both) == [("FATAL_ERROR", "53Z01", 0)]  # together they would overspend
        assert charges(server, "alice") == spent
        answered = simple(connection, "SET dpsql.epsilon = 0.25; SELECT sex, COUNT(*) FROM adult WHERE age > 40 GROUP BY sex; SHOW dpsql.epsilon")
        assert answered == [("COMMAND_OK", None, 0), ("TUPLES_OK", None, 2), ("TUPLES_OK", None, 1)]  # answered in full
    assert charges(server, "alice") == spent + 1


def test_set_refuses_an_epsilon_no_statement_could_spend(server: Server) -> None:
    with psycopg.connect(dsn(server, "alice"), autocommit=True) as connection:
        for value in ("1e308", "0", "-1", "nan", "inf"):
            with pytest.raises(psycopg.errors.InvalidParameterValue):
                connection.execute(f"SET dpsql.epsilon = {value}")
        assert connection.execute("SHOW dpsql.epsilon").fetchone() == ("0.5",)  # unchanged: the analyst's default
        connection.execute("SET dpsql.epsilon = 1e9")  # the largest a statement may spend: accepted


def test_a_cost_comment_inside_a_line_comment_is_not_honoured(server: Server) -> None:
    with psycopg.connect(dsn(server, "alice"), autocommit=True) as connection:
        before = connection.execute("SHOW dpsql.budget").fetchone()[0]  # type: ignore[index]
        connection.execute("SELECT COUNT(*) FROM adult WHERE age > 50 -- /* dpsql: epsilon=2 */")
        assert before - connection.execute("SHOW dpsql.budget").fetchone()[0] == 0.5  # type: ignore[index]  # the default


def test_a_malformed_extended_protocol_message_ends_the_connection_with_08P01(server: Server) -> None:
    connection = psycopg.connect(dsn(server, "carol"), autocommit=True)
    raw = socket.socket(fileno=os.dup(connection.pgconn.socket))
    try:
        for body in (b"\x00\x00", b"portal\x00stmt"):  # a Bind cut short; one without its terminators
            raw.sendall(b"B" + struct.pack("!i", len(body) + 4) + body)
        raw.settimeout(5)
        answer = b""
        while chunk := raw.recv(4096):
            answer += chunk
    finally:
        raw.close()
        connection.close()
    assert answer[:1] == b"E" and b"SFATAL" in answer and b"C08P01" in answer
    assert b"XX000" not in answer and b"Error" not in answer and b"unpack" not in answer  # no Python exception text


def test_shutdown_stops_statements_not_yet_charged_and_tells_every_client(tmp_path: Path, adult_schema: dict[str, object]) -> None:
    from conftest import make_adult

    config = write_config(tmp_path, make_adult(persons=300, seed=6), adult_schema, limits={"statement_seconds": 30})
    server = Server(__import__("dpsql.serve.config", fromlist=["ServeConfig"]).ServeConfig.load(config))
    server.start(host="127.0.0.1", port=0)
    outcome: list[str] = []
    try:
        with psycopg.connect(dsn(server, "alice"), autocommit=True) as connection, psycopg.connect(dsn(server, "bob"), autocommit=True) as idle:

            def run() -> None:
                try:
                    connection.execute(slow())
                    outcome.append("released")
                except psycopg.Error as error:
                    outcome.append(str(error.sqlstate))

            worker = threading.Thread(target=run)
            worker.start()
            time.sleep(0.2)
            server.stop()
            worker.join()
            with pytest.raises(psycopg.OperationalError):
                idle.execute("SHOW dpsql.budget")
    finally:
        server.stop()
    assert outcome == ["57P01"]
    with sqlite3.connect(tmp_path / "ledgers" / "alice.ledger") as ledger:
        assert ledger.execute("SELECT COUNT(*) FROM charges").fetchone()[0] == 0
