"""The ledger's (ε, δ) part, which partition selection charges (dpsql.accountant, dpsql.keys)."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

import dpsql
from dpsql.accountant import Budget, Cost, Ledger, spent_of


def test_the_approximate_part_adds_up_on_top_of_either_accounting() -> None:
    budget = Budget(epsilon=10.0, delta=1e-5)
    selection = Cost("laplace", 0.5**2 / 2, 0.5, approximate_epsilon=0.7, delta=1e-7)
    pure = spent_of([selection, Cost.pure(0.25)], budget)
    assert (pure.epsilon, pure.delta) == (pytest.approx(0.5 + 0.7 + 0.25), pytest.approx(1e-7))
    gaussian = Cost("gaussian", 0.1, None, approximate_epsilon=0.3, delta=2e-6)
    mixed = spent_of([gaussian], budget)
    log_term = math.log(1 / (1e-5 - 2e-6))  # the zCDP conversion gets the δ the selection left
    assert mixed.epsilon == pytest.approx(0.1 + 2 * math.sqrt(0.1 * log_term) + 0.3)
    assert mixed.delta == 1e-5
    exhausted = spent_of([Cost("gaussian", 0.1, None, 0.3, 1e-5)], budget)
    assert exhausted.epsilon == math.inf  # no δ left to convert zCDP with


def test_charges_persist_and_delta_is_refused_beyond_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path, Budget(epsilon=5.0, delta=1e-6))
    ledger.charge(Cost("laplace", 0.02, 0.2, approximate_epsilon=0.8, delta=6e-7), "SELECT k, COUNT(*) FROM t GROUP BY k")
    ledger.close()
    reopened = Ledger(path, None)
    assert reopened.spent().epsilon == pytest.approx(1.0) and reopened.spent().delta == pytest.approx(6e-7)
    assert reopened.remaining().delta == pytest.approx(4e-7)
    with pytest.raises(dpsql.BudgetExceededError, match="more delta than the budget has left"):
        reopened.charge(Cost("laplace", 0.0, 0.0, approximate_epsilon=0.1, delta=5e-7), "again")
    assert reopened.spent().statements == 1
    reopened.close()


def test_a_ledger_written_before_the_approximate_part_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    database = sqlite3.connect(path)
    database.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value REAL NOT NULL)")
    database.execute(
        "CREATE TABLE charges (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, mechanism TEXT NOT NULL, "
        "epsilon REAL, rho REAL NOT NULL, statement TEXT NOT NULL)"
    )
    database.executemany("INSERT INTO meta VALUES (?, ?)", [("budget_epsilon", 2.0), ("budget_delta", 1e-6)])
    database.execute("INSERT INTO charges (at, mechanism, epsilon, rho, statement) VALUES ('2024-05-01T12:00:00+00:00', 'laplace', 0.5, 0.125, 'old')")
    database.commit()
    database.close()
    ledger = Ledger(path, None)
    assert (ledger.spent().epsilon, ledger.spent().delta) == (pytest.approx(0.5), 0.0)
    ledger.charge(Cost("laplace", 0.0, 0.0, approximate_epsilon=0.5, delta=1e-7), "new")
    assert (ledger.spent().epsilon, ledger.spent().delta) == (pytest.approx(1.0), pytest.approx(1e-7))
    ledger.close()


def test_an_overspending_selection_names_both_parts() -> None:
    ledger = Ledger(None, Budget(epsilon=1.0, delta=1e-6))
    with pytest.raises(dpsql.BudgetExceededError, match=r"epsilon=0\.3 and selection epsilon=0\.9"):
        ledger.charge(Cost("laplace", 0.045, 0.3, approximate_epsilon=0.9, delta=1e-7), "too much")
    assert ledger.spent().statements == 0
