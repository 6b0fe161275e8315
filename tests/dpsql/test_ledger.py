"""The budget ledger: composition arithmetic, persistence across restarts, refusal, and no overspending
by concurrent threads or processes sharing one ledger file."""

from __future__ import annotations

import math
import multiprocessing
import sqlite3
import threading
from pathlib import Path

import pandas as pd
import pytest

import dpsql
from dpsql.accountant import Budget, Cost, Ledger, spent_of


@pytest.mark.parametrize(
    ("epsilon", "delta", "message"),
    [
        (0.0, 0.0, "epsilon must lie in"),
        (-1.0, 0.0, "epsilon must lie in"),
        (math.inf, 0.0, "finite"),
        (math.nan, 0.0, "finite"),
        (True, 0.0, "finite number"),
        ("1", 0.0, "finite number"),
        (1.0, -1e-9, "delta must lie in"),
        (1.0, 1.0, "delta must lie in"),
    ],
)
def test_bad_budgets_are_programming_errors(epsilon: object, delta: object, message: str) -> None:
    with pytest.raises(dpsql.ProgrammingError, match=message):
        Budget(epsilon, delta)  # type: ignore[arg-type]


def test_pure_epsilon_adds_up() -> None:
    ledger = Ledger(None, Budget(1.0))
    for _ in range(3):
        ledger.charge(Cost.pure(0.25), "q")
    spent = ledger.spent()
    assert (spent.epsilon, spent.delta, spent.statements) == (0.75, 0.0, 3)
    assert spent.rho == pytest.approx(3 * 0.25**2 / 2)
    assert ledger.remaining() == pytest.approx(0.25)
    with pytest.raises(dpsql.BudgetExceededError, match="more than the budget has left"):
        ledger.charge(Cost.pure(0.26), "q")
    ledger.charge(Cost.pure(0.25), "q")  # exactly exhausting the budget is allowed
    assert ledger.remaining() == 0.0 and ledger.spent().statements == 4


def test_budgets_read_as_exact_decimals_and_a_pure_budget_shows_no_rho() -> None:
    """3 − (0.5 + 1.0 + 0.85) is 0.6499999999999999 in floating point; the ledger's sums are exact, and
    what it reports is the decimal. A pure-ε budget has no ρ to spend: its repr shows none."""
    ledger = Ledger(None, Budget(3.0))
    for epsilon in (0.5, 1.0, 0.85):
        ledger.charge(Cost.pure(epsilon), "q")
    remaining, spent = ledger.remaining(), ledger.spent()
    assert remaining.epsilon == 0.65 and remaining == 0.65 and spent.epsilon == 2.35 and spent.rho == 0.98625
    assert repr(remaining) == "Remaining(epsilon=0.65, delta=0.0)"
    assert repr(spent) == "Spent(epsilon=2.35, delta=0.0, statements=3)"
    ledger.charge(Cost.pure(0.65), "q")  # what it says is left can be spent
    mixed = Ledger(None, Budget(3.0, delta=1e-6))
    mixed.charge(Cost.pure(0.1), "q")
    mixed.charge(Cost.pure(0.2), "q")
    assert repr(mixed.spent()) == "Spent(epsilon=0.3, delta=0.0, rho=0.025, statements=2)"  # 0.1²/2 + 0.2²/2
    assert repr(mixed.remaining()).startswith("Remaining(epsilon=2.7, delta=1e-06, rho=")


def test_zcdp_conversion_and_mixed_accounting() -> None:
    budget = Budget(epsilon=3.0, delta=1e-6)
    log_term = math.log(1e6)
    gaussian = [Cost.zcdp(0.01), Cost.zcdp(0.02)]
    spent = spent_of(gaussian, budget)
    assert spent.epsilon == pytest.approx(0.03 + 2 * math.sqrt(0.03 * log_term))
    assert spent.delta == 1e-6
    # a pure charge is counted either as rho = eps^2/2 inside zCDP or added as pure epsilon: the smaller wins
    mixed = spent_of(gaussian + [Cost.pure(0.5)], budget)
    all_zcdp = 0.03 + 0.125 + 2 * math.sqrt(0.155 * log_term)
    split = 0.5 + 0.03 + 2 * math.sqrt(0.03 * log_term)
    assert mixed.epsilon == pytest.approx(min(all_zcdp, split))
    # the budget's rho is exactly the rho whose conversion equals its epsilon
    assert spent_of([Cost.zcdp(budget.rho)], budget).epsilon == pytest.approx(3.0)


def test_gaussian_needs_delta() -> None:
    ledger = Ledger(None, Budget(1.0))
    with pytest.raises(dpsql.BudgetExceededError, match="delta > 0"):
        ledger.charge(Cost.zcdp(0.001), "q")
    with pytest.raises(dpsql.ProgrammingError, match="delta > 0"):
        dpsql.connect(budget=dpsql.Budget(1.0), noise="gaussian")


def test_ledger_persists_and_keeps_its_budget(tmp_path: Path) -> None:
    path = tmp_path / "budget.ledger"
    first = Ledger(path, Budget(2.0, 1e-6))
    first.charge(Cost.pure(0.5), "SELECT 1")
    first.close()
    reopened = Ledger(path, None)  # the stored budget is used
    assert reopened.budget == Budget(2.0, 1e-6)
    assert reopened.remaining() == pytest.approx(1.5)
    reopened.close()
    with pytest.raises(dpsql.IntegrityError, match="created with budget"):
        Ledger(path, Budget(5.0, 1e-6))
    with pytest.raises(dpsql.ProgrammingError, match="needs a budget"):
        Ledger(tmp_path / "new.ledger", None)
    rows = sqlite3.connect(path).execute("SELECT mechanism, epsilon, statement FROM charges").fetchall()
    assert rows == [("laplace", 0.5, "SELECT 1")]


def test_threads_sharing_a_ledger_cannot_overspend(tmp_path: Path) -> None:
    path = tmp_path / "shared.ledger"
    Ledger(path, Budget(2.0)).close()
    successes: list[int] = []
    lock = threading.Lock()

    def spend() -> None:
        ledger = Ledger(path, None)
        mine = 0
        for _ in range(10):
            try:
                ledger.charge(Cost.pure(0.1), "q")
                mine += 1
            except dpsql.BudgetExceededError:
                pass
        ledger.close()
        with lock:
            successes.append(mine)

    threads = [threading.Thread(target=spend) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = Ledger(path, None)
    assert sum(successes) == 20  # 60 attempts, room for exactly 20
    assert final.spent().epsilon == pytest.approx(2.0)


def _spend_in_process(path: str, attempts: int, results: multiprocessing.Queue) -> None:
    ledger = Ledger(path, None)
    made = 0
    for _ in range(attempts):
        try:
            ledger.charge(Cost.pure(0.1), "q")
            made += 1
        except dpsql.BudgetExceededError:
            pass
    results.put(made)


def test_processes_sharing_a_ledger_cannot_overspend(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.ledger")
    Ledger(path, Budget(1.5)).close()
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    workers = [context.Process(target=_spend_in_process, args=(path, 8, results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    made = [results.get(timeout=10) for _ in workers]
    assert sum(made) == 15  # 24 attempts, room for exactly 15
    assert Ledger(path, None).spent().epsilon == pytest.approx(1.5)


# -- through the engine --------------------------------------------------------------------------------

SCHEMA = {"privacy_unit": None, "columns": {"sex": {"categories": ["F", "M"]}}}
FRAME = pd.DataFrame({"sex": ["F", "M", "F"]})
QUERY = "SELECT sex, COUNT(*) FROM t GROUP BY sex"


def _connection(path: Path | None, budget: dpsql.Budget | None = dpsql.Budget(1.0)) -> dpsql.Connection:
    connection = dpsql.connect(budget=budget, ledger=path, reuse=False)  # every repetition is charged afresh
    connection.register("t", FRAME, schema=SCHEMA)
    return connection


def test_budget_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "adult.ledger"
    with _connection(path) as connection:
        connection.cursor().execute(QUERY, epsilon=0.4)
        assert connection.budget_remaining() == pytest.approx(0.6)
    with _connection(path, budget=None) as connection:
        assert connection.budget_remaining() == pytest.approx(0.6)
        assert connection.budget_remaining().epsilon == pytest.approx(0.6)
        assert connection.budget_spent().statements == 1


def test_refused_statement_reads_no_data_and_charges_nothing() -> None:
    connection = _connection(None)
    connection.cursor().execute(QUERY, epsilon=0.7)
    reads: list[str] = []
    original = connection._session.backend.run
    connection._session.backend.run = lambda sql: reads.append(sql) or original(sql)  # type: ignore[method-assign]
    with pytest.raises(dpsql.BudgetExceededError, match="more than the budget has left"):
        connection.cursor().execute(QUERY, epsilon=0.31)
    assert reads == []
    assert connection.budget_remaining() == pytest.approx(0.3)
    connection.cursor().execute(QUERY, epsilon=0.3)
    assert len(reads) == 1 and connection.budget_remaining() == pytest.approx(0.0)


def test_a_statement_that_fails_before_reading_charges_nothing() -> None:
    connection = _connection(None)
    with pytest.raises(dpsql.ProgrammingError):
        connection.cursor().execute("SELECT colour, COUNT(*) FROM t GROUP BY colour", epsilon=0.5)
    assert connection.budget_remaining() == 1.0 and connection.budget_spent().statements == 0


def test_a_statement_whose_read_fails_is_charged_and_says_nothing_of_the_rows() -> None:
    """Once the backend is asked for private rows the statement is paid for (one charge rule): a failure
    there may depend on the data, so it must not be free to retry; its text may quote a row: withheld."""
    connection = _connection(None)

    def broken(sql: str) -> dict:
        raise dpsql.OperationalError("could not convert 'Alice Smith' to INT64")

    connection._session.backend.run = broken  # type: ignore[method-assign]
    with pytest.raises(dpsql.OperationalError, match=r"private rows \(OperationalError\); the statement was charged") as raised:
        connection.cursor().execute(QUERY, epsilon=0.5)
    assert "Alice" not in str(raised.value) and raised.value.__cause__ is None
    assert connection.budget_remaining() == pytest.approx(0.5) and connection.budget_spent().statements == 1


def test_charge_is_committed_before_rows_are_returned(tmp_path: Path) -> None:
    path = tmp_path / "durable.ledger"
    connection = _connection(path)
    cursor = connection.cursor().execute(QUERY, epsilon=0.25)
    observer = sqlite3.connect(path)  # another connection sees the committed charge at once
    assert observer.execute("SELECT epsilon, statement FROM charges").fetchall() == [(0.25, QUERY)]
    assert len(cursor.fetchall()) == 2


def test_threads_through_the_engine_cannot_overspend(tmp_path: Path) -> None:
    path = tmp_path / "engine.ledger"
    _connection(path).close()
    released: list[int] = []
    lock = threading.Lock()

    def analyst() -> None:
        connection = _connection(path, budget=None)
        for _ in range(5):
            try:
                connection.cursor().execute(QUERY, epsilon=0.125)
                with lock:
                    released.append(1)
            except dpsql.BudgetExceededError:
                pass
        connection.close()

    threads = [threading.Thread(target=analyst) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(released) == 8  # 15 attempts, budget 1.0 / 0.125
    with _connection(path, budget=None) as connection:
        assert connection.budget_remaining() == pytest.approx(0.0)


def test_gaussian_mode_charges_rho() -> None:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1.0, delta=1e-6), noise="gaussian", reuse=False)
    connection.register("t", FRAME, schema=SCHEMA)
    connection.cursor().execute(QUERY, rho=0.001)
    connection.cursor().execute(QUERY, epsilon=0.1)  # rho = 0.1^2 / 2
    spent = connection.budget_spent()
    assert spent.rho == pytest.approx(0.001 + 0.005)
    assert spent.epsilon == pytest.approx(0.006 + 2 * math.sqrt(0.006 * math.log(1e6)))
    with pytest.raises(dpsql.ProgrammingError, match="rho= is for Gaussian"):
        _connection(None).cursor().execute(QUERY, rho=0.1)
