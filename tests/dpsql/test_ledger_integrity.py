"""The ledger file cannot be reset silently: it identifies itself, its running totals and last charge
are checked on open (the whole history on demand), a truncated, deleted or edited ledger is refused
with an IntegrityError that says what happened, new files are 0600, a check reads one row, and kill -9
never leaves a release without a charge."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import stat
import threading
import time
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

import dpsql
from dpsql import ledger_format, ledger_registry
from dpsql.accountant import Budget, Cost, Ledger, Totals

SCHEMA = {"privacy_unit": None, "columns": {"sex": {"categories": ["F", "M"]}}}
QUERY = "SELECT sex, COUNT(*) FROM t GROUP BY sex"


def spent_ledger(path: Path, charges: int = 3) -> None:
    ledger = Ledger(path, Budget(2.0, 1e-6))
    for index in range(charges):
        ledger.charge(Cost.pure(0.25), f"SELECT {index}")
    ledger.close()


def connect(path: Path) -> dpsql.Connection:
    return dpsql.connect(budget=dpsql.Budget(2.0, 1e-6), ledger=path)


# -- identity and permissions ------------------------------------------------------------------------------


def test_a_new_ledger_identifies_itself_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "budget.ledger"
    spent_ledger(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds every statement's text
    assert stat.S_IMODE((tmp_path / ledger_registry.REGISTRY_NAME).stat().st_mode) == 0o600
    database = sqlite3.connect(path)
    assert database.execute("PRAGMA application_id").fetchone()[0] == ledger_format.APPLICATION_ID == 0x64707371
    assert database.execute("PRAGMA user_version").fetchone()[0] == ledger_format.FORMAT_VERSION
    (header,) = database.execute("SELECT format, version, ledger_id, budget_epsilon, budget_delta FROM header").fetchall()
    assert header[:2] == ("dpsql-ledger", 3) and len(header[2]) == 32 and header[3:] == (2.0, 1e-6)
    opened = Ledger(path, None)
    assert opened.ledger_id == header[2]
    assert all(stat.S_IMODE(file.stat().st_mode) == 0o600 for file in tmp_path.iterdir())  # the registry's log too
    opened.close()
    assert sorted(os.listdir(tmp_path)) == [ledger_registry.REGISTRY_NAME, "budget.ledger"]  # no temporary file left


def test_running_totals_are_exact_and_match_the_history(tmp_path: Path) -> None:
    """Ten charges of 0.1: the totals are the exact sum of the ten doubles (not 1.0, not a float sum)."""
    path = tmp_path / "exact.ledger"
    ledger = Ledger(path, Budget(1.0))
    for _ in range(10):
        ledger.charge(Cost.pure(0.1), "q")  # the 10th fits: exactly 1.0000000000000000555 ≤ 1 + tolerance
    row = sqlite3.connect(path).execute("SELECT charges, pure_epsilon FROM totals").fetchone()
    assert row == (10, ledger_format.exact_text(10 * Fraction(0.1)))
    assert Totals.of(charge.cost for charge in ledger.history()) == ledger._totals()
    with pytest.raises(dpsql.BudgetExceededError):
        ledger.charge(Cost.pure(1e-9), "q")


def test_a_check_reads_one_row_at_any_length_of_history(tmp_path: Path) -> None:
    """O(1): check() and charge() never read the charges table (the earlier re-sum cost 1.76 s at
    100,000 charges)."""
    ledger = Ledger(tmp_path / "fast.ledger", Budget(1000.0))
    for _ in range(50):
        ledger.charge(Cost.pure(0.01), "q")
    statements: list[str] = []
    ledger._db.set_trace_callback(statements.append)
    ledger.check(Cost.pure(0.01))
    ledger.charge(Cost.pure(0.01), "q")
    ledger.spent(), ledger.remaining()
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert reads and all("FROM totals" in s for s in reads)
    assert not any("FROM charges" in s for s in statements)


def test_history_lists_every_charge(tmp_path: Path) -> None:
    path = tmp_path / "history.ledger"
    before = time.time()
    with dpsql.connect(budget=dpsql.Budget(2.0, 1e-6), ledger=path, reuse=False) as connection:
        connection.register("t", pd.DataFrame({"sex": ["F", "M"]}), schema=SCHEMA)
        connection.cursor().execute(QUERY, epsilon=0.5)
        connection.cursor().execute(QUERY, epsilon=0.25)
    ledger = Ledger(path, None)
    ledger.charge(Cost("gaussian", 0.01, None, approximate_epsilon=0.2, delta=1e-8), "SELECT k FROM t GROUP BY k")
    history = ledger.history()
    assert [(c.number, c.statement, c.mechanism, c.epsilon, c.rho, c.approximate_epsilon, c.delta) for c in history] == [
        (1, QUERY, "laplace", 0.5, 0.125, 0.0, 0.0),
        (2, QUERY, "laplace", 0.25, 0.03125, 0.0, 0.0),
        (3, "SELECT k FROM t GROUP BY k", "gaussian", None, 0.01, 0.2, 1e-8),
    ]
    assert all(before - 1 <= c.time.timestamp() <= time.time() + 1 for c in history)
    assert history[0].time <= history[1].time <= history[2].time


# -- resets are refused ------------------------------------------------------------------------------------


def test_a_truncated_ledger_is_refused_not_restarted(tmp_path: Path) -> None:
    path = tmp_path / "budget.ledger"
    spent_ledger(path)
    path.write_bytes(b"")
    with pytest.raises(dpsql.IntegrityError, match=r"empty \(0 bytes\): its history is gone"):
        connect(path)
    assert path.stat().st_size == 0  # nothing was written over it


def test_a_deleted_ledger_is_refused_not_recreated(tmp_path: Path) -> None:
    path = tmp_path / "budget.ledger"
    spent_ledger(path)
    path.unlink()
    with pytest.raises(dpsql.IntegrityError, match=r"is gone: ledger [0-9a-f]{32} was created at this path") as caught:
        connect(path)
    assert ledger_registry.REGISTRY_NAME in str(caught.value) and not path.exists()
    connect(tmp_path / "fresh.ledger").close()  # a new path starts a new budget


@pytest.mark.parametrize("table", ["charges", "totals", "header"])
def test_a_dropped_table_is_refused(tmp_path: Path, table: str) -> None:
    path = tmp_path / "budget.ledger"
    spent_ledger(path)
    database = sqlite3.connect(path)
    database.execute(f"DROP TABLE {table}")
    database.commit()
    with pytest.raises(dpsql.IntegrityError, match=rf"lost its table\(s\) \['{table}'\]: its history is gone"):
        connect(path)


OPEN_REFUSES = [  # edits that a constant-time open catches: the totals, the last charge, the header
    ("DELETE FROM charges WHERE id = 3", r"ends at charge #2, but its running totals end at charge #3"),
    ("DELETE FROM charges WHERE id = 2", "charge #3 .* breaks its checksum chain"),
    ("DELETE FROM charges", r"ends at charge #0, but its running totals end at charge #3"),
    ("UPDATE charges SET epsilon = 0.001 WHERE id = 3", "charge #3 .* breaks its checksum chain"),
    ("UPDATE charges SET statement = 'SELECT 9' WHERE id = 3", "charge #3 .* breaks its checksum chain"),
    ("UPDATE charges SET rho = 'lots' WHERE id = 3", r"charge #3 .* is corrupt \(rho 'lots'\)"),
    ("UPDATE totals SET pure_epsilon = '0/1'", "running totals that do not match their digest"),
    ("UPDATE totals SET charges = 0, head = 'x'", "running totals that do not match their digest"),
    ("UPDATE totals SET rho = 'many'", "running total rho is not an exact number"),
    ("DELETE FROM totals", "corrupt running totals"),
    ("DELETE FROM header", "corrupt header"),
    ("UPDATE header SET budget_epsilon = -1", "records an invalid budget"),
    ("UPDATE header SET version = 4", r"format version 4 in its header; .*\(a newer dpsql wrote it\?\)"),
]
HISTORY_REFUSES = [  # edits deeper in the history: Ledger.verify_history() reads every charge
    ("UPDATE charges SET epsilon = 0.001 WHERE id = 1", "charge #1 .* breaks its checksum chain"),
    ("UPDATE charges SET statement = 'SELECT 9' WHERE id = 2", "charge #2 .* breaks its checksum chain"),
    ("DELETE FROM charges WHERE id = 1", "charge #2 .* breaks its checksum chain"),
    ("UPDATE charges SET rho = 'lots' WHERE id = 2", r"charge #2 .* is corrupt \(rho 'lots'\)"),
    ("UPDATE charges SET at = 'yesterday' WHERE id = 1", r"charge #1 .* is corrupt \(time 'yesterday'\)"),
    ("DELETE FROM charges WHERE id = 3", r"3 charge\(s\) recorded, 2 in its history"),
    ("DELETE FROM charges", r"3 charge\(s\) recorded, 0 in its history"),
    ("UPDATE charges SET epsilon = 0.001 WHERE id = 3", "charge #3 .* breaks its checksum chain"),
]


def edited_ledger(path: Path, edit: str) -> None:
    spent_ledger(path)
    database = sqlite3.connect(path)
    database.execute(edit)
    database.commit()
    database.close()


@pytest.mark.parametrize(("edit", "message"), OPEN_REFUSES)
def test_edited_totals_or_last_charge_are_refused_on_open(tmp_path: Path, edit: str, message: str) -> None:
    edited_ledger(tmp_path / "budget.ledger", edit)
    with pytest.raises(dpsql.IntegrityError, match=message):
        Ledger(tmp_path / "budget.ledger", None)


@pytest.mark.parametrize(("edit", "message"), HISTORY_REFUSES)
def test_verify_history_finds_every_edited_charge(tmp_path: Path, edit: str, message: str) -> None:
    path = tmp_path / "budget.ledger"
    spent_ledger(path)
    ledger = Ledger(path, None)
    assert ledger.verify_history() == 3
    database = sqlite3.connect(path)
    database.execute(edit)
    database.commit()
    with pytest.raises(dpsql.IntegrityError, match=message):
        ledger.verify_history()


def test_files_that_are_not_ledgers_are_refused_and_kept(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.ledger"
    garbage.write_bytes(b"not a database at all, just text" * 10)
    with pytest.raises(dpsql.IntegrityError, match="not a readable dpsql budget ledger"):
        connect(garbage)
    other = tmp_path / "other.sqlite"
    database = sqlite3.connect(other)
    database.execute("CREATE TABLE notes (text TEXT)")
    database.commit()
    with pytest.raises(dpsql.IntegrityError, match="is not a dpsql budget ledger"):
        connect(other)
    empty_database = tmp_path / "empty.sqlite"
    sqlite3.connect(empty_database).execute("PRAGMA user_version = 1").connection.commit()
    with pytest.raises(dpsql.IntegrityError, match="it has no tables: its history is gone"):
        connect(empty_database)
    assert database.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]


def format_1_ledger(path: Path, meta: list[tuple[str, object]], rho: object = 0.125) -> None:
    database = sqlite3.connect(path)
    database.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value REAL NOT NULL)")
    database.execute(
        "CREATE TABLE charges (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, mechanism TEXT NOT NULL, "
        "epsilon REAL, rho REAL NOT NULL, statement TEXT NOT NULL)"
    )
    database.executemany("INSERT INTO meta VALUES (?, ?)", meta)
    database.execute(
        "INSERT INTO charges (at, mechanism, epsilon, rho, statement) VALUES ('2024-05-01T12:00:00+00:00', 'laplace', 0.5, ?, 'q')",
        (rho,),
    )
    database.commit()
    database.close()


@pytest.mark.parametrize(
    ("meta", "rho", "message"),
    [
        ([("budget_epsilon", 2.0)], 0.125, "corrupt budget record"),  # the budget_delta row is missing: not a KeyError
        ([("budget_epsilon", 2.0), ("budget_delta", "x")], 0.125, "corrupt budget record"),
        ([("budget_epsilon", 2.0), ("budget_delta", 0.0)], "abc", r"is corrupt \(rho 'abc'\)"),  # not a TypeError
    ],
)
def test_corrupt_format_1_ledgers_are_integrity_errors(tmp_path: Path, meta: list, rho: object, message: str) -> None:
    path = tmp_path / "old.ledger"
    format_1_ledger(path, meta, rho)
    with pytest.raises(dpsql.IntegrityError, match=message):
        Ledger(path, None)


def test_a_format_1_ledger_is_upgraded_once_and_then_checked(tmp_path: Path) -> None:
    path = tmp_path / "old.ledger"
    format_1_ledger(path, [("budget_epsilon", 2.0), ("budget_delta", 0.0)])
    first = Ledger(path, Budget(2.0))
    assert first.spent().epsilon == 0.5 and first.history()[0].statement == "q"
    identity = first.ledger_id
    first.close()
    assert Ledger(path, None).ledger_id == identity  # upgraded once, then read as format 2
    database = sqlite3.connect(path)
    database.execute("UPDATE charges SET epsilon = 0.1")
    database.commit()
    with pytest.raises(dpsql.IntegrityError, match="checksum chain"):
        Ledger(path, None)


# -- concurrency and crashes -----------------------------------------------------------------------------------


def _create_and_report(path: str, results: multiprocessing.Queue) -> None:
    ledger = Ledger(path, Budget(1.0))
    ledger.charge(Cost.pure(0.1), "q")
    results.put(ledger.ledger_id)


def test_processes_creating_one_ledger_at_once_share_it(tmp_path: Path) -> None:
    """Four processes create the same new ledger at the same moment: one file, one id, every charge in it."""
    path = str(tmp_path / "race.ledger")
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    workers = [context.Process(target=_create_and_report, args=(path, results)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    identities = {results.get(timeout=10) for _ in workers}
    assert len(identities) == 1 and Ledger(path, None).spent().statements == 4
    assert [name for name in os.listdir(tmp_path) if name.endswith(".creating")] == []


def _charge_until_killed(path: str, released: int, threads: int) -> None:
    """Charge one ledger object from ``threads`` threads (their charges commit in groups) until killed;
    each thread reports a release only after its charge returned."""
    ledger = Ledger(path, None)

    def charge_forever() -> None:
        while True:
            ledger.charge(Cost.pure(0.001), "q")
            os.write(released, b"r")

    for _ in range(threads - 1):
        threading.Thread(target=charge_forever, daemon=True).start()
    charge_forever()


@pytest.mark.parametrize(("threads", "kills"), [(1, 30), (8, 15)])
def test_kill_9_never_leaves_a_release_without_a_charge(tmp_path: Path, threads: int, kills: int) -> None:
    """Processes killed at random moments while charging — one thread, or eight charging one ledger object
    at once, in groups: the ledger always opens (its totals and last charge intact, continuing the
    registry's checkpoint), its whole history matches its totals, and it holds at least as many charges as
    releases were made."""
    path = str(tmp_path / "killed.ledger")
    Ledger(path, Budget(1000.0)).close()
    context = multiprocessing.get_context("fork")
    chooser = random.Random(17)
    releases = 0
    for _ in range(kills):
        reader, writer = os.pipe()
        worker = context.Process(target=_charge_until_killed, args=(path, writer, threads))
        worker.start()
        os.close(writer)
        time.sleep(chooser.uniform(0.05, 0.25))
        os.kill(worker.pid, signal.SIGKILL)
        worker.join()
        while chunk := os.read(reader, 4096):
            releases += len(chunk)
        os.close(reader)
        reopened = Ledger(path, None)
        assert reopened.spent().statements >= releases
        assert reopened.verify_history() == reopened.spent().statements
        reopened.close()
    assert releases > 0
