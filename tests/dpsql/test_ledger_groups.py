"""Charges made at once on one ledger object commit in groups: several charges, one transaction (one
fsync), each caller back only once the group holding its charge is durable, each charge checked against
the charges ahead of it in its group, and the registry's checkpoint moved to the group's last charge."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import dpsql
from dpsql import ledger_registry
from dpsql.accountant import Budget, Cost, Ledger
from concurrency_helpers import at_once

CALLERS = 16


def slow_first_commit(ledger: Ledger, entered: list[int]) -> list[str]:
    """Record the ledger's COMMITs (with ``synchronous=FULL`` each is one durable write, its fsyncs); the
    first one waits until every caller has entered ``charge`` (counted in ``entered``), so the others
    queue behind it as they would behind a slow disk. Returns the list the COMMITs are recorded in."""
    commits: list[str] = []

    def trace(statement: str) -> None:
        if statement == "COMMIT":
            commits.append(statement)
            if len(commits) == 1:
                deadline = time.monotonic() + 10
                while len(entered) < CALLERS and time.monotonic() < deadline:
                    time.sleep(0.005)
                time.sleep(0.3)  # from "entered" to waiting in the queue: a few microseconds

    ledger._db.set_trace_callback(trace)  # type: ignore[union-attr]
    return commits


def test_charges_made_at_once_share_commits(tmp_path: Path) -> None:
    """16 callers charging at once while a commit is under way: the old ledger committed (and fsynced) 16
    times in a row; now the 15 that queued behind the first share the next commit."""
    path = tmp_path / "grouped.ledger"
    ledger = Ledger(path, Budget(10.0))
    entered: list[int] = []
    commits = slow_first_commit(ledger, entered)

    def charge(index: int) -> object:
        entered.append(index)
        return ledger.charge(Cost.pure(0.125), f"SELECT {index}")

    numbers = at_once(CALLERS, charge, dpsql.Error)
    assert sorted(numbers) == list(range(1, CALLERS + 1))  # type: ignore[type-var]
    assert len(commits) <= 3  # the first caller's, then the queue's (one more if a thread was slow to queue)
    ledger.close()
    reopened = Ledger(path, None)
    assert reopened.verify_history() == CALLERS and reopened.spent().epsilon == 2.0
    stored = sqlite3.connect(path).execute("SELECT last_charge, head, digest FROM totals").fetchone()
    registry = sqlite3.connect(tmp_path / ledger_registry.REGISTRY_NAME)
    assert registry.execute("SELECT last_charge, head, digest FROM ledgers").fetchone() == stored  # at the last group's end


def test_a_group_spends_exactly_the_budget_never_more(tmp_path: Path) -> None:
    """64 charges of 2^-5 queued in one group against a budget of 1.0: each is checked against those ahead
    of it in the group, so exactly 32 are recorded and 32 refused (BudgetExceededError), as without groups."""
    path = tmp_path / "race.ledger"
    ledger = Ledger(path, Budget(1.0))
    outcomes = at_once(64, lambda index: ledger.charge(Cost.pure(2.0**-5), f"SELECT {index}"), dpsql.Error)
    assert sum(isinstance(o, int) for o in outcomes) == 32
    assert sum(isinstance(o, dpsql.BudgetExceededError) for o in outcomes) == 32
    assert ledger.spent().epsilon == 1.0 and ledger.remaining().epsilon == 0.0
    assert sqlite3.connect(path).execute("SELECT COUNT(*), SUM(epsilon) FROM charges").fetchone() == (32, 1.0)


def returned_before_durable(path: Path, charge: Callable[[int], int]) -> list[int]:
    """Charge from 16 threads at once; the charges whose call returned before an independent connection to
    the file could see them committed (what a release would have been based on)."""
    early: list[int] = []

    def checked(index: int) -> int:
        number = charge(index)
        with sqlite3.connect(path) as observer:  # another connection sees only committed transactions
            if observer.execute("SELECT COUNT(*) FROM charges WHERE id = ?", (number,)).fetchone()[0] != 1:
                early.append(number)
        return number

    at_once(CALLERS, checked, dpsql.Error)
    return early


def test_no_caller_returns_before_its_charge_is_durable(tmp_path: Path) -> None:
    path = tmp_path / "durable.ledger"
    ledger = Ledger(path, Budget(10.0))
    assert returned_before_durable(path, lambda index: ledger.charge(Cost.pure(0.125), f"SELECT {index}")) == []


def test_the_durability_check_catches_a_ledger_that_returns_early(tmp_path: Path) -> None:
    """The deliberately broken variant: a charge that returns its number before its commit is made."""
    path = tmp_path / "early.ledger"
    ledger = Ledger(path, Budget(10.0))
    lock = threading.Lock()
    issued: list[int] = []

    def early(index: int) -> int:
        with lock:
            issued.append(len(issued) + 1)
            number = issued[-1]
        threading.Timer(0.2, ledger.charge, args=(Cost.pure(0.125), f"SELECT {index}")).start()
        return number

    assert len(returned_before_durable(path, early)) == CALLERS
    time.sleep(1.0)  # let the late charges finish before the ledger is collected


def test_a_failed_group_fails_every_caller_and_records_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file rolled back under the open ledger: the group that finds it refuses every charge in it."""
    path = tmp_path / "failed.ledger"
    ledger = Ledger(path, Budget(10.0))
    ledger.charge(Cost.pure(0.125), "SELECT 0")
    old = path.read_bytes()
    ledger.charge(Cost.pure(0.125), "SELECT 1")
    path.write_bytes(old)
    outcomes = at_once(8, lambda index: ledger.charge(Cost.pure(0.125), f"SELECT {index}"), dpsql.Error)
    assert all(isinstance(o, dpsql.IntegrityError) and "older copy" in str(o) for o in outcomes)
    assert len({id(o) for o in outcomes}) == 8  # an exception of its own for each caller's thread
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM charges").fetchone() == (1,)
