"""A ledger file cannot be rolled back, replaced or downgraded behind its directory's registry, and it
opens in constant time at any length of history.

The registry (``dpsql.ledger_registry``) is the second durable record: each ledger's id, format, last
charge, chain value and totals digest, moved forward after every charge. An older copy restored over
the file, another ledger put in its place, or a file converted to an older format with the sqlite3 shell
is refused — on open, and at the next charge of a ledger that is already open."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

import dpsql
import dpsql.testing
from dpsql import ledger_format, ledger_registry
from dpsql.accountant import Budget, Cost, Ledger

SCHEMA = {"privacy_unit": None, "columns": {"sex": {"categories": ["F", "M"]}}}
QUERY = "SELECT sex, COUNT(*) FROM t GROUP BY sex"
FRAME = pd.DataFrame({"sex": ["F", "M", "M"]})


def charged(path: Path, charges: int, budget: Budget | None = Budget(2.0)) -> Ledger:
    ledger = Ledger(path, budget)
    for index in range(charges):
        ledger.charge(Cost.pure(0.25), f"SELECT {index}")
    return ledger


def release(path: Path, epsilon: float) -> None:
    with dpsql.connect(budget=dpsql.Budget(1.0), ledger=path, reuse=False) as connection:
        connection.register("t", FRAME, schema=SCHEMA)
        connection.cursor().execute(QUERY, epsilon=epsilon).fetchall()


# -- restore, replace, downgrade ------------------------------------------------------------------------------


def test_restoring_an_older_copy_does_not_regain_spent_budget(tmp_path: Path) -> None:
    """Spend 0.5, copy the file, spend 0.5 more (the whole budget of 1.0), put the copy back: the old code
    opened the copy with 0.5 left and released a third statement — 1.5 under a budget of 1.0."""
    path, backup = tmp_path / "budget.ledger", tmp_path / "backup" / "budget.ledger"
    backup.parent.mkdir()
    release(path, 0.5)
    shutil.copy2(path, backup)
    release(path, 0.5)
    with pytest.raises(dpsql.BudgetExceededError):
        release(path, 0.5)
    shutil.copy2(backup, path)
    with pytest.raises(dpsql.IntegrityError, match=r"ends at charge #1, but charge #2 was recorded: the file is an older copy"):
        release(path, 0.5)
    assert ledger_registry.REGISTRY_NAME in str(pytest.raises(dpsql.IntegrityError, Ledger, path, None).value)


def test_a_file_restored_under_an_open_ledger_refuses_its_next_charge(tmp_path: Path) -> None:
    """A served session keeps its ledger open: the file copied back under it is caught at the next charge,
    before anything is recorded or released."""
    path = tmp_path / "budget.ledger"
    charged(path, 2).close()
    old = path.read_bytes()
    ledger = charged(path, 0)
    ledger.charge(Cost.pure(0.25), "SELECT 3")
    path.write_bytes(old)  # in place, as cp does: the open connection reads the old content
    with pytest.raises(dpsql.IntegrityError, match="older copy"):
        ledger.charge(Cost.pure(0.25), "SELECT 4")
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM charges").fetchone() == (2,)


def test_replacing_the_file_with_a_ledger_made_elsewhere_is_refused(tmp_path: Path) -> None:
    path, elsewhere = tmp_path / "budget.ledger", tmp_path / "other" / "budget.ledger"
    elsewhere.parent.mkdir()
    charged(path, 3).close()
    charged(elsewhere, 0).close()  # a fresh ledger with the same budget and file name
    shutil.copy2(elsewhere, path)
    with pytest.raises(dpsql.IntegrityError, match=r"is ledger [0-9a-f]{32}, but ledger [0-9a-f]{32} .* is registered at this path: the file was replaced"):
        Ledger(path, Budget(2.0))


def test_a_fork_of_the_same_ledger_is_refused(tmp_path: Path) -> None:
    """A copy that went on charging elsewhere has the same id and as many charges, but another history."""
    path, elsewhere = tmp_path / "budget.ledger", tmp_path / "other" / "budget.ledger"
    elsewhere.parent.mkdir()
    charged(path, 2).close()
    shutil.copy2(path, elsewhere)
    charged(path, 1).close()
    charged(elsewhere, 2, None).close()  # ahead of the registry, but not its history
    shutil.copy2(elsewhere, path)
    with pytest.raises(dpsql.IntegrityError, match=r"does not continue the history registered for it \(charge #3 differs\)"):
        Ledger(path, None)


def downgrade_to_format_1(path: Path, keep: int) -> None:
    """What the sqlite3 shell can do: the ledger converted to format 1 (a meta table, no header, chain
    or totals), keeping its first ``keep`` charges."""
    database = sqlite3.connect(path)
    budget = database.execute("SELECT budget_epsilon, budget_delta FROM header").fetchone()
    database.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value REAL NOT NULL); DROP TABLE header; DROP TABLE totals; "
        f"DELETE FROM charges WHERE id > {keep}; ALTER TABLE charges DROP COLUMN chain; PRAGMA application_id = 0; "
        "PRAGMA user_version = 0;"
    )
    database.executemany("INSERT INTO meta VALUES (?, ?)", [("budget_epsilon", budget[0]), ("budget_delta", budget[1])])
    database.commit()
    database.close()


def downgrade_to_format_2(path: Path) -> None:
    """The ledger converted to format 2 (totals without sequence number and digest), history intact."""
    database = sqlite3.connect(path)
    database.executescript(
        "ALTER TABLE totals DROP COLUMN last_charge; ALTER TABLE totals DROP COLUMN digest; UPDATE header SET version = 2; "
        "PRAGMA user_version = 2;"
    )
    database.close()


@pytest.mark.parametrize(("downgrade", "version"), [(lambda path: downgrade_to_format_1(path, 1), 1), (downgrade_to_format_2, 2)])
def test_a_ledger_downgraded_with_the_sqlite3_shell_is_refused(tmp_path: Path, downgrade: object, version: int) -> None:
    """The old code upgraded a format-1 file as a new ledger (a fresh id, the dropped charges forgotten)."""
    path = tmp_path / "budget.ledger"
    charged(path, 3).close()
    downgrade(path)  # type: ignore[operator]
    with pytest.raises(dpsql.IntegrityError, match=rf"has format {version}, but it was registered with format 3: the file was downgraded"):
        Ledger(path, None)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == (0 if version == 1 else 2)  # left as it was


def test_an_unregistered_format_2_ledger_is_upgraded_after_its_whole_history_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "budget.ledger"
    charged(path, 3).close()
    downgrade_to_format_2(path)
    (tmp_path / ledger_registry.REGISTRY_NAME).unlink()  # as a ledger of the previous dpsql release is found
    upgraded = Ledger(path, None)
    assert upgraded.spent().epsilon == 0.75 and upgraded.verify_history() == 3
    upgraded.charge(Cost.pure(0.25), "SELECT 4")
    upgraded.close()
    assert sqlite3.connect(path).execute("SELECT version FROM header").fetchone() == (3,)
    downgrade_to_format_2(path)
    database = sqlite3.connect(path)
    database.execute("UPDATE charges SET epsilon = 0.001 WHERE id = 1")
    database.commit()
    (tmp_path / ledger_registry.REGISTRY_NAME).unlink()
    with pytest.raises(dpsql.IntegrityError, match="charge #1 .* breaks its checksum chain"):
        Ledger(path, None)


def test_a_legacy_text_registry_is_carried_over(tmp_path: Path) -> None:
    """Directories of the previous release kept a JSON-lines registry: its names are still known (a
    deleted ledger is not re-created; a format-1 file at a known name is a downgrade), and a damaged line
    or a byte that is not UTF-8 is skipped, never a UnicodeDecodeError."""
    (tmp_path / ledger_registry.LEGACY_NAME).write_bytes(
        b'{"ledger": "gone.ledger", "id": "' + b"a" * 32 + b'", "created_at": "2024-01-01"}\n\xff\xfe broken\n'
    )
    with pytest.raises(dpsql.IntegrityError, match=r"gone: ledger a{32} was created at this path on 2024-01-01"):
        Ledger(tmp_path / "gone.ledger", Budget(1.0))
    charged(tmp_path / "new.ledger", 1).close()


def test_a_damaged_registry_is_an_integrity_error(tmp_path: Path) -> None:
    charged(tmp_path / "budget.ledger", 1).close()
    (tmp_path / ledger_registry.REGISTRY_NAME).write_bytes(b"\xff\xfe not a database" * 100)
    with pytest.raises(dpsql.IntegrityError, match="the ledger registry .* is damaged"):
        Ledger(tmp_path / "budget.ledger", None)


def test_a_damaged_text_in_the_ledger_is_an_integrity_error(tmp_path: Path) -> None:
    path = tmp_path / "budget.ledger"
    charged(path, 2).close()
    database = sqlite3.connect(path)
    database.execute("UPDATE charges SET statement = CAST(x'ff00fe' AS TEXT) WHERE id = 2")
    database.commit()
    with pytest.raises(dpsql.IntegrityError, match="charge #2 .* breaks its checksum chain"):
        Ledger(path, None)


# -- crashes and the registry ---------------------------------------------------------------------------------


def test_a_registry_one_charge_behind_after_a_crash_is_caught_up(tmp_path: Path) -> None:
    """The checkpoint is written after the charge commits: a crash between leaves the registry behind,
    which the next open accepts (the file continues it) and moves forward."""
    path = tmp_path / "budget.ledger"
    ledger = charged(path, 2)
    ledger._registry = None  # the process dies after the commit, before the registry is written
    ledger.charge(Cost.pure(0.25), "SELECT 3")
    ledger._db.close()  # type: ignore[union-attr]
    registry = sqlite3.connect(tmp_path / ledger_registry.REGISTRY_NAME)
    assert registry.execute("SELECT last_charge FROM ledgers").fetchone() == (2,)
    Ledger(path, None).close()
    assert registry.execute("SELECT last_charge FROM ledgers").fetchone() == (3,)


def test_open_takes_constant_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old open re-chained every charge (16.9 s at 100,000); now it checks the last one."""
    path = tmp_path / "budget.ledger"
    ledger = Ledger(path, Budget(1000.0))
    ledger._db.execute("PRAGMA synchronous=OFF")  # type: ignore[union-attr]
    for index in range(300):
        ledger.charge(Cost.pure(0.001), f"SELECT {index}")
    ledger.close()
    links: list[str] = []
    original = ledger_format.chained
    monkeypatch.setattr(ledger_format, "chained", lambda previous, charge: links.append(previous) or original(previous, charge))
    Ledger(path, None).close()
    assert len(links) == 1


def test_a_crash_mid_charge_leaves_an_openable_ledger(tmp_path: Path) -> None:
    """A charge whose transaction never committed leaves no trace in the file or the registry."""
    path = tmp_path / "budget.ledger"
    ledger = charged(path, 1)
    with pytest.raises(dpsql.BudgetExceededError):
        ledger.charge(Cost.pure(5.0), "too much")
    ledger.close()
    reopened = Ledger(path, None)
    assert reopened.spent().statements == 1 and reopened.verify_history() == 1


# -- dpsql serve ------------------------------------------------------------------------------------------


def test_serve_refuses_an_analyst_ledger_restored_from_an_older_copy(tmp_path: Path, adult_schema: dict[str, object]) -> None:
    """The server's ledger directory keeps the registry: a copy of alice's ledger from before her last
    statement, put back while the server runs, is refused at her next login (FATAL, with the reason) and at start-up."""
    import psycopg
    from conftest import make_adult
    from serve_helpers import dsn, running, write_config

    from dpsql.serve import ServeConfig, Server

    config = write_config(tmp_path, make_adult(persons=50, seed=3), adult_schema)
    ledger = tmp_path / "ledgers" / "alice.ledger"
    with running(config) as server:
        backup = ledger.read_bytes()
        with psycopg.connect(dsn(server, "alice"), autocommit=True) as connection:
            connection.execute("SELECT COUNT(*) FROM adult").fetchall()
        ledger.write_bytes(backup)
        with pytest.raises(psycopg.OperationalError, match="FATAL: .* the file is an older copy"):
            psycopg.connect(dsn(server, "alice"), autocommit=True)
        with psycopg.connect(dsn(server, "bob"), autocommit=True) as connection:  # other ledgers are unaffected
            assert connection.execute("SHOW dpsql.budget").fetchone()[0] == 3.0  # type: ignore[index]
    with pytest.raises(dpsql.IntegrityError, match="alice.ledger' ends at charge #0, but charge #1 was recorded"):
        Server(ServeConfig.load(config)).start(host="127.0.0.1", port=0)
