"""The privacy budget and its durable ledger.

Every statement has a cost: pure ε (discrete Laplace noise) or ρ-zCDP (discrete Gaussian noise).
Spending is accounted two ways and the smaller (ε, δ) is reported (MATH.md §1):

* pure: when every charge is pure ε-DP, ε adds up and δ = 0;
* zCDP: ε-DP implies ε²/2-zCDP, ρ adds up, and ρ-zCDP implies
  (ρ + 2·sqrt(ρ·ln(1/δ)), δ)-DP at the budget's δ; pure charges may also be summed separately
  and added to the converted Gaussian part, whichever is smaller.
* approximate part: a charge may also carry an (ε, δ)-DP part (partition selection of unknown
  GROUP BY keys, ``dpsql.keys``). It never enters the zCDP sum: its ε and δ add up (basic
  composition) on top of either accounting, and the zCDP conversion uses what is left of the
  budget's δ.

The ledger is a SQLite file. A charge is one ``BEGIN IMMEDIATE`` transaction that re-reads what
was spent, refuses the charge if it would exceed the budget, and inserts it; the commit is fsynced
(``synchronous=FULL``) before the caller may release anything. So two threads or processes sharing
a ledger serialize their charges and can never overspend together. The budget is stored in the
ledger when it is created; reopening it with a different budget is refused.

>>> ledger = Ledger(None, Budget(epsilon=1.0))
>>> ledger.charge(Cost.pure(0.25), "SELECT ...")
1
>>> ledger.remaining().epsilon
0.75
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dpsql.errors import BudgetExceededError, IntegrityError, OperationalError, ProgrammingError

TOLERANCE = 1e-12  # floating slack when comparing spent and budgeted ε
LOCK_TIMEOUT_SECONDS = 60.0


def _check_number(name: str, value: object, low: float, high: float, low_inclusive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProgrammingError(f"{name} must be a finite number, got {value!r}")
    if value < low or (value == low and not low_inclusive) or value >= high:
        bracket = "[" if low_inclusive else "("
        raise ProgrammingError(f"{name} must lie in {bracket}{low:g}, {high:g}), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Budget:
    """The total privacy a connection may spend: (ε, δ)-differential privacy.

    δ = 0 allows only pure ε-DP statements (Laplace noise); Gaussian noise needs δ > 0.
    """

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _check_number("Budget epsilon", self.epsilon, 0.0, math.inf, False))
        object.__setattr__(self, "delta", _check_number("Budget delta", self.delta, 0.0, 1.0, True))

    @property
    def rho(self) -> float:
        """The largest ρ whose zCDP→(ε, δ) conversion fits in this budget (0 when δ = 0)."""
        if self.delta == 0:
            return 0.0
        log_term = math.log(1 / self.delta)
        return (math.sqrt(log_term + self.epsilon) - math.sqrt(log_term)) ** 2


@dataclass(frozen=True)
class Cost:
    """What one statement spends: ``pure`` ε-DP (``rho`` = ε²/2) or ρ-zCDP (``epsilon`` None)."""

    mechanism: str  # "laplace" or "gaussian"
    rho: float
    epsilon: float | None = None
    approximate_epsilon: float = 0.0  # an (ε, δ)-DP part composed by addition (partition selection)
    delta: float = 0.0

    @classmethod
    def pure(cls, epsilon: float) -> Cost:
        epsilon = _check_number("epsilon", epsilon, 0.0, math.inf, False)
        return cls("laplace", epsilon**2 / 2, epsilon)

    @classmethod
    def zcdp(cls, rho: float) -> Cost:
        return cls("gaussian", _check_number("rho", rho, 0.0, math.inf, False))

    @classmethod
    def combined(cls, costs: list[Cost]) -> Cost:
        """The sequential composition of costs of one mechanism, as a single charge."""
        pure = all(c.epsilon is not None for c in costs)
        epsilon = sum(c.epsilon for c in costs) if pure else None  # type: ignore[misc]
        approximate = sum(c.approximate_epsilon for c in costs), sum(c.delta for c in costs)
        return cls(costs[0].mechanism, sum(c.rho for c in costs), epsilon, *approximate)


class Remaining(float):
    """What is left: a float (the ε left) that also carries ``epsilon``, ``delta`` and ``rho``.

    ``rho`` is the zCDP budget left for Gaussian statements (0 when δ = 0).
    """

    epsilon: float
    delta: float
    rho: float

    def __new__(cls, epsilon: float, delta: float, rho: float) -> Remaining:
        value = super().__new__(cls, epsilon)
        value.epsilon, value.delta, value.rho = epsilon, delta, rho
        return value

    def __repr__(self) -> str:
        return f"Remaining(epsilon={self.epsilon!r}, delta={self.delta!r}, rho={self.rho!r})"


@dataclass(frozen=True)
class Spent:
    """The (ε, δ) spent so far (the better of the two accountings), the zCDP total, and the count."""

    epsilon: float
    delta: float
    rho: float
    statements: int


def spent_of(costs: list[Cost], budget: Budget) -> Spent:
    """Compose a list of costs into the (ε, δ) spent, under ``budget``'s δ."""
    rho_total = sum(c.rho for c in costs)
    pure_total = sum(c.epsilon for c in costs if c.epsilon is not None)
    gaussian_rho = sum(c.rho for c in costs if c.epsilon is None)
    approximate_epsilon = sum(c.approximate_epsilon for c in costs)
    approximate_delta = sum(c.delta for c in costs)
    if gaussian_rho == 0:
        return Spent(pure_total + approximate_epsilon, approximate_delta, rho_total, len(costs))
    conversion_delta = budget.delta - approximate_delta
    if conversion_delta <= 0:
        return Spent(math.inf, max(budget.delta, approximate_delta), rho_total, len(costs))
    log_term = math.log(1 / conversion_delta)
    all_zcdp = rho_total + 2 * math.sqrt(rho_total * log_term)
    split = pure_total + gaussian_rho + 2 * math.sqrt(gaussian_rho * log_term)
    return Spent(min(all_zcdp, split) + approximate_epsilon, budget.delta, rho_total, len(costs))


class Ledger:
    """Durable record of the charges against one budget (SQLite; ``path=None`` keeps it in memory)."""

    def __init__(self, path: str | Path | None, budget: Budget | None) -> None:
        self.path = None if path is None else str(path)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                self.path or ":memory:", timeout=LOCK_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=%d" % int(LOCK_TIMEOUT_SECONDS * 1000))
            self.budget = self._open(budget)
        except sqlite3.Error as error:
            raise OperationalError(f"cannot open the budget ledger {self.path!r}: {error}") from error

    def _open(self, budget: Budget | None) -> Budget:
        with self._transaction():
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value REAL NOT NULL)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, "
                "mechanism TEXT NOT NULL, epsilon REAL, rho REAL NOT NULL, statement TEXT NOT NULL)"
            )
            present = {row[1] for row in self._db.execute("PRAGMA table_info(charges)").fetchall()}
            for column in ("approximate_epsilon", "delta"):  # ledgers written before the approximate part
                if column not in present:
                    self._db.execute(f"ALTER TABLE charges ADD COLUMN {column} REAL NOT NULL DEFAULT 0")
            stored = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
            if not stored:
                if budget is None:
                    raise ProgrammingError("a new ledger needs a budget: connect(budget=dpsql.Budget(epsilon=..., delta=...))")
                self._db.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [("budget_epsilon", budget.epsilon), ("budget_delta", budget.delta)],
                )
                return budget
            recorded = Budget(stored["budget_epsilon"], stored["budget_delta"])
            if budget is not None and budget != recorded:
                raise IntegrityError(
                    f"the ledger {self.path!r} was created with budget (epsilon={recorded.epsilon}, "
                    f"delta={recorded.delta}); pass that budget, or omit it, or start a new ledger"
                )
            return recorded

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """A write transaction: takes the database's write lock at once, so readers see no half-state."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _costs(self) -> list[Cost]:
        rows = self._db.execute("SELECT mechanism, rho, epsilon, approximate_epsilon, delta FROM charges").fetchall()
        return [Cost(*row) for row in rows]

    def _refusal(self, spent: Spent, costs: list[Cost], cost: Cost) -> BudgetExceededError | None:
        after = spent_of(costs + [cost], self.budget)
        if cost.delta > 0 and sum(c.delta for c in costs) + cost.delta > self.budget.delta * (1 + TOLERANCE):
            return BudgetExceededError(
                f"the statement (delta={cost.delta:g}) would spend more delta than the budget has left: "
                f"spent delta={sum(c.delta for c in costs):.6g} of {self.budget.delta:g}; use a smaller "
                "connection.selection_delta or start a new budget"
            )
        if after.epsilon <= self.budget.epsilon + TOLERANCE:
            return None
        if cost.epsilon is None and self.budget.delta == 0:
            return BudgetExceededError("Gaussian noise needs a budget with delta > 0; this budget has delta = 0")
        asked = f"epsilon={cost.epsilon:g}" if cost.epsilon is not None else f"rho={cost.rho:g}"
        if cost.approximate_epsilon:
            asked += f" and selection epsilon={cost.approximate_epsilon:g}"
        return BudgetExceededError(
            f"the statement ({asked}) would spend more than the budget has left: spent epsilon={spent.epsilon:.6g} "
            f"of {self.budget.epsilon:g} (after it: {after.epsilon:.6g}); ask for less or start a new budget"
        )

    def check(self, cost: Cost) -> None:
        """Raise :class:`BudgetExceededError` if ``cost`` would not fit now (reads the ledger only)."""
        with self._lock:
            try:
                costs = self._costs()
            except sqlite3.Error as error:
                raise OperationalError(f"cannot read the budget ledger: {error}") from error
        refusal = self._refusal(spent_of(costs, self.budget), costs, cost)
        if refusal is not None:
            raise refusal

    def charge(self, cost: Cost, statement: str) -> int:
        """Atomically check and record ``cost``; durable (fsynced) when this returns. Returns the charge id."""
        with self._lock:
            try:
                with self._transaction():
                    costs = self._costs()
                    refusal = self._refusal(spent_of(costs, self.budget), costs, cost)
                    if refusal is not None:
                        raise refusal
                    cursor = self._db.execute(
                        "INSERT INTO charges (at, mechanism, epsilon, rho, approximate_epsilon, delta, statement) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (
                            datetime.now(UTC).isoformat(), cost.mechanism, cost.epsilon, cost.rho,
                            cost.approximate_epsilon, cost.delta, statement,
                        ),
                    )
                    return int(cursor.lastrowid)
            except sqlite3.Error as error:
                raise OperationalError(f"cannot write the budget ledger: {error}") from error

    def spent(self) -> Spent:
        with self._lock:
            try:
                return spent_of(self._costs(), self.budget)
            except sqlite3.Error as error:
                raise OperationalError(f"cannot read the budget ledger: {error}") from error

    def remaining(self) -> Remaining:
        """What is left; ``delta`` is the budget's δ less what (ε, δ) charges (partition selection) spent."""
        with self._lock:
            try:
                costs = self._costs()
            except sqlite3.Error as error:
                raise OperationalError(f"cannot read the budget ledger: {error}") from error
        spent = spent_of(costs, self.budget)
        epsilon_left = max(0.0, self.budget.epsilon - spent.epsilon)
        rho_left = max(0.0, self.budget.rho - spent.rho) if self.budget.delta > 0 else 0.0
        return Remaining(epsilon_left, max(0.0, self.budget.delta - sum(c.delta for c in costs)), rho_left)

    def close(self) -> None:
        with self._lock:
            self._db.close()
