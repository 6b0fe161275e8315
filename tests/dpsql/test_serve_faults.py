"""``dpsql serve`` under load and faults: 16 clients × 50 statements never overspend, a client killed
in the middle of a statement is charged by the engine's rule and leaves a consistent ledger, 1,000
malformed protocol messages leave the server serving, SIGTERM shuts ``dpsql serve --demo`` down."""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import psycopg
import pytest

from dpsql.serve import Server
from serve_helpers import ANALYSTS, dsn, running, write_config

STATEMENT_EPSILON = 2.0**-6  # exact in binary: 192 statements spend bob's budget of 3.0 exactly
BUDGET_STATEMENTS = 192


@pytest.fixture()
def server(tmp_path: Path, adult_schema: dict[str, object]) -> Iterator[Server]:
    from conftest import make_adult

    with running(write_config(tmp_path, make_adult(persons=600, seed=3), adult_schema)) as started:
        yield started


def charges(server: Server, ledger: str) -> list[tuple[float, str]]:
    with sqlite3.connect(Path(server.config.ledgers) / f"{ledger}.ledger") as database:  # type: ignore[arg-type]
        return database.execute("SELECT epsilon, statement FROM charges ORDER BY id").fetchall()


def wait_for(condition: object, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_16_clients_50_statements_each_never_overspend(server: Server) -> None:
    outcomes: list[str] = []
    lock = threading.Lock()

    def client(number: int) -> None:
        with psycopg.connect(dsn(server, "bob"), autocommit=True) as connection:
            connection.execute(f"SET dpsql.epsilon = {STATEMENT_EPSILON!r}")
            for index in range(50):
                try:  # a WHERE makes every statement a fresh measurement (never answered from kept ones)
                    rows = connection.execute("SELECT COUNT(*) FROM adult WHERE age > %s", (17 + index % 60,)).fetchall()
                    outcome = "released" if len(rows) == 1 else "wrong"
                except psycopg.Error as error:
                    outcome = error.sqlstate or "no sqlstate"
                with lock:
                    outcomes.append(outcome)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(outcomes) == 800
    assert outcomes.count("released") == BUDGET_STATEMENTS
    assert outcomes.count("53Z01") == 800 - BUDGET_STATEMENTS  # every other statement refused: budget exhausted
    recorded = charges(server, "bob")
    assert len(recorded) == BUDGET_STATEMENTS  # one charge per release, none without
    assert sum(epsilon for epsilon, _ in recorded) == 3.0
    with psycopg.connect(dsn(server, "bob"), autocommit=True) as connection:
        assert connection.execute("SHOW dpsql.budget").fetchone()[0] == 0.0  # type: ignore[index]


def test_a_client_killed_mid_statement_is_charged_once_and_the_server_goes_on(server: Server) -> None:
    connection = psycopg.connect(dsn(server, "alice"), autocommit=True)
    statement = b"/* dpsql: epsilon=0.25 */ SELECT sex, race, COUNT(*) FROM adult WHERE age > 30 GROUP BY CUBE (sex, race)"
    connection.pgconn.send_query(statement)
    connection.pgconn.flush()
    killed = socket.socket(fileno=os.dup(connection.pgconn.socket))
    killed.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    killed.shutdown(socket.SHUT_RDWR)  # the client vanishes without reading its answer
    killed.close()
    connection.close()
    wait_for(lambda: not server._service.sessions)  # type: ignore[union-attr]
    # the statement ran to its end: read, charged once, durably; its answer went nowhere
    assert charges(server, "alice") == [(0.25, statement.decode())]
    with psycopg.connect(dsn(server, "alice"), autocommit=True) as fresh:
        assert fresh.execute("SHOW dpsql.budget").fetchone()[0] == 4.75  # type: ignore[index]


def test_a_cancelled_statement_leaves_a_consistent_ledger(server: Server) -> None:
    statement = "/* dpsql: epsilon=0.25 */ SELECT job, sex, COUNT(*) FROM adult WHERE age > %s GROUP BY CUBE (job, sex)"
    with psycopg.connect(dsn(server, "alice"), autocommit=True) as connection:
        connection.execute(statement, (21,))  # the server now knows the statement's columns: a cancel meets the engine
        outcome: list[str] = []

        def run() -> None:
            try:
                connection.execute(statement, (20,)).fetchall()
                outcome.append("released")
            except psycopg.Error as error:
                outcome.append("cancelled" if isinstance(error, psycopg.errors.QueryCanceled) else repr(error))

        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(0.02)
        connection.cancel_safe()  # a CancelRequest on a connection of its own
        worker.join()
        # the next statement waits for a cancelled one still running, then sees its charge
        left = connection.execute("SHOW dpsql.budget").fetchone()[0]  # type: ignore[index]
    recorded = charges(server, "alice")
    assert outcome in (["released"], ["cancelled"])
    assert len(recorded) in (1, 2) and left == 5.0 - 0.25 * len(recorded)  # whole charges only
    if outcome == ["released"]:
        assert len(recorded) == 2


def _authenticated_socket(server: Server) -> tuple[psycopg.Connection, socket.socket]:
    connection = psycopg.connect(dsn(server, "carol"), autocommit=True)
    return connection, socket.socket(fileno=os.dup(connection.pgconn.socket))


def _fuzzed_startup(rng: random.Random) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 64))
    if kind == 1:
        return struct.pack("!ii", rng.randrange(-5, 100_000), rng.randrange(-(2**31), 2**31)) + rng.randbytes(rng.randrange(16))
    if kind == 2:
        return struct.pack("!ii", 8, 80877103) + rng.randbytes(rng.randrange(1, 40))  # SSLRequest, then garbage
    if kind == 3:
        body = struct.pack("!i", 196608) + b"user\x00" + rng.randbytes(rng.randrange(30))
        return struct.pack("!i", len(body) + 4) + body  # a startup message with a mangled user name
    return struct.pack("!ii", 2**31 - 1, 196608)  # a length no server should wait for


def _fuzzed_message(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    payload = rng.randbytes(rng.randrange(0, 48))
    if kind == 0:  # a real message type with a garbage body
        return rng.choice(b"PBDECHQp").to_bytes(1, "big") + struct.pack("!i", len(payload) + 4) + payload
    if kind == 1:  # a type no frontend sends
        return rng.choice(b"AzZ!0~\x00\xff").to_bytes(1, "big") + struct.pack("!i", len(payload) + 4) + payload
    if kind == 2:  # a length that lies
        return b"Q" + struct.pack("!i", rng.choice([0, 1, 3, -1, 2**30])) + payload
    return b"B" + struct.pack("!i", len(payload) + 4)[: rng.randrange(1, 4)]  # truncated


def test_1000_malformed_messages_leave_the_server_serving(server: Server) -> None:
    rng = random.Random(16)
    bystander = psycopg.connect(dsn(server, "bob"), autocommit=True)  # a client that behaves throughout
    host, port = server.address  # type: ignore[misc]
    for _ in range(400):  # before authentication
        with socket.create_connection((host, port), timeout=5) as raw:
            raw.sendall(_fuzzed_startup(rng))
            raw.shutdown(socket.SHUT_WR)
            try:
                raw.recv(4096)  # an error, 'S'/'N', or the server hanging up
            except (ConnectionError, TimeoutError):
                pass
    sent = 0
    while sent < 600:  # after authentication: each connection until the server closes it
        connection, raw = _authenticated_socket(server)
        try:
            for _ in range(rng.randrange(1, 12)):
                raw.sendall(_fuzzed_message(rng))
                sent += 1
        except (ConnectionError, BrokenPipeError):
            pass
        finally:
            raw.close()
            connection.close()
    assert bystander.execute("SHOW dpsql.budget").fetchone() == (3.0, 0.0, 0.0)
    with psycopg.connect(dsn(server, "alice"), autocommit=True) as fresh:
        assert len(fresh.execute("/* dpsql: epsilon=0.5 */ SELECT sex, COUNT(*) FROM adult GROUP BY sex").fetchall()) == 2
    bystander.close()
    wait_for(lambda: not server._service.sessions)  # type: ignore[union-attr]  # no session left behind
    assert charges(server, "group-research") == []  # no fuzzed message ever reached the data


def test_sigterm_shuts_the_demo_server_down_gracefully() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "dpsql.cli", "serve", "--demo", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        banner = [process.stdout.readline() for _ in range(4)]  # type: ignore[union-attr]
        port = int(re.search(r"on 127\.0\.0\.1:(\d+)", banner[0]).group(1))  # type: ignore[union-attr]
        assert banner[1] == "user: demo\n"
        password = banner[2].removeprefix("password: ").strip()
        assert len(password) >= 16
        with psycopg.connect(f"host=127.0.0.1 port={port} user=demo password={password} dbname=dpsql", autocommit=True) as connection:
            assert len(connection.execute("SELECT sex, COUNT(*) FROM census GROUP BY sex").fetchall()) == 2
            assert connection.execute("SHOW dpsql.budget").fetchone()[0] == pytest.approx(0.9)  # type: ignore[index]
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
        assert "shutting down" in process.stderr.read()  # type: ignore[union-attr]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_refused_ledger_tells_the_analyst_one_line_and_the_operator_the_rest(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """An older copy of bob's ledger put back under the running server: his next charge and his next login
    are refused with 55000 in one line that names neither the server's files nor the operator's remedy
    (the old server sent the ledger's path, the registry's path and a sqlite3 command to the analyst);
    the server's log has them, under the incident number the analyst was given."""
    path = Path(server.config.ledgers) / "bob.ledger"  # type: ignore[arg-type]
    statements = [f"SELECT sex, COUNT(*) FROM adult GROUP BY sex, {column} /* dpsql: epsilon=0.125 */" for column in ("race", "age", "job")]
    with psycopg.connect(dsn(server, "bob"), autocommit=True) as connection:
        connection.execute(statements[0]).fetchall()
        old = path.read_bytes()
        connection.execute(statements[1]).fetchall()
        assert len(charges(server, "bob")) == 2
        path.write_bytes(old)
        refusals = []
        with pytest.raises(psycopg.Error) as charged:
            connection.execute(statements[2]).fetchall()
        refusals.append(charged.value)
    with pytest.raises(asyncpg.PostgresError) as login:  # psycopg gives no SQLSTATE for a refused login
        host, port = server.address  # type: ignore[misc]
        asyncio.run(asyncpg.connect(host=host, port=port, user="bob", password=ANALYSTS["bob"][0], database="dpsql"))
    refusals.append(login.value)
    for refusal in refusals:
        message = str(refusal).strip()
        assert "\n" not in message and refusal.sqlstate == "55000", message
        assert str(path.parent) not in message and "sqlite3" not in message and ".dpsql-ledgers" not in message, message
        assert re.search(r"incident ([0-9a-f]{8})", message), message
        incident = re.search(r"incident ([0-9a-f]{8})", message).group(1)  # type: ignore[union-attr]
        assert any(incident in record.getMessage() and "sqlite3" in record.getMessage() for record in caplog.records), incident
