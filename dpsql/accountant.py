"""The privacy budget and its durable ledger.

Every statement has a cost: pure ε (discrete Laplace noise) or ρ-zCDP (discrete Gaussian noise).
Spending is accounted two ways and the smaller (ε, δ) is reported (docs/math.md §1):

* pure: when every charge is pure ε-DP, ε adds up and δ = 0;
* zCDP: ε-DP implies ε²/2-zCDP, ρ adds up, and ρ-zCDP implies
  (ρ + 2·sqrt(ρ·ln(1/δ)), δ)-DP at the budget's δ; pure charges may also be summed separately
  and added to the converted Gaussian part, whichever is smaller.
* approximate part: a charge may also carry an (ε, δ)-DP part (partition selection of unknown
  GROUP BY keys, ``dpsql.keys``). It never enters the zCDP sum: its ε and δ add up (basic
  composition) on top of either accounting, and the zCDP conversion uses what is left of the
  budget's δ.

Sums are exact (:class:`Totals`: rationals, in any order); only the final conversion is floating point.

The ledger is a SQLite file (its format: :mod:`dpsql.ledger_format`). Charges are recorded in
``BEGIN IMMEDIATE`` transactions that read the running totals (one row), refuse each charge that would
exceed the budget beside those before it, insert the others, each chained to the history, and update the
totals; the commit is fsynced (``synchronous=FULL``) before any caller may release anything, and then the
ledger's checkpoint in its directory's registry (:mod:`dpsql.ledger_registry`) moves forward. Threads
charging one :class:`Ledger` object at once commit in groups: while one transaction commits, the charges
that arrive wait, and the next transaction records all of them under one fsync (a server's analyst with
eight statements at once pays one fsync for the eight, not eight in a row); each charge is checked against
the totals plus the charges ahead of it in its group, and its caller returns only once the group is
durable — a crash at any moment loses whole groups whose callers have released nothing. Separate objects
and processes sharing a file serialize their transactions in SQLite. So no two charges can overspend
together, and a check, a charge or opening the ledger costs the same after ten charges or a million. Opening a ledger checks
the digest of its totals and its last charge (:meth:`Ledger.verify_history` checks every charge), and
refuses a ledger whose totals or last charge were altered, whose file is empty, whose tables are gone,
whose file was deleted, or which does not continue its registered checkpoint (an older copy put back,
another ledger in its place, a downgraded file) — it never starts a fresh budget in their place. The
budget is stored in the ledger when it is created; reopening it with a different budget is refused.

>>> ledger = Ledger(None, Budget(epsilon=1.0))
>>> ledger.charge(Cost.pure(0.25), "SELECT ...")
1
>>> ledger.remaining().epsilon
0.75
"""

from __future__ import annotations

import math
import numbers
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

from dpsql import ledger_format, ledger_registry
from dpsql.errors import BudgetExceededError, Error, IntegrityError, OperationalError, ProgrammingError
from dpsql.ledger_registry import Checkpoint, Registry

TOLERANCE = 1e-12  # floating slack when comparing spent and budgeted ε
LOCK_TIMEOUT_SECONDS = 60.0
MIN_EPSILON = 1e-9
"""Smallest ε a budget or a statement may have: below it the noise drowns every count (and the
planner's arithmetic underflows)."""
MAX_EPSILON = 1e9
"""Largest ε a budget or a statement may have: far beyond any meaningful guarantee (and ε² stays finite)."""
MIN_RHO = MIN_EPSILON**2 / 2
MAX_RHO = MAX_EPSILON**2 / 2
_EPSILON_RANGE = " (below, the noise drowns every count; above, nothing is protected)"
_MECHANISMS = ("laplace", "gaussian")
_EXACT_SCALE_BITS = 1074  # every double is a multiple of 2^-1074: sums over a history as scaled integers
_TOTALS_COLUMNS = "charges, head, rho, pure_epsilon, gaussian_rho, approximate_epsilon, delta"  # of every format since 2


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_number(name: str, value: object, low: float, high: float, *, low_open: bool = False, high_open: bool = False, why: str = "") -> float:
    """``value`` as a float if it is a real number in the interval, else a :class:`ProgrammingError`
    naming ``name`` (an int beyond the doubles, NaN and ±inf are not finite numbers)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ProgrammingError(f"{name} must be a finite number, got {_shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the doubles
        number = math.inf
    if not math.isfinite(number):
        raise ProgrammingError(f"{name} must be a finite number, got {_shown(value)}")
    if number < low or number > high or (low_open and number == low) or (high_open and number == high):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ProgrammingError(f"{name} must lie in {interval}, got {_shown(value)}{why}")
    return number


@dataclass(frozen=True)
class Budget:
    """The total privacy a connection may spend: (ε, δ)-differential privacy.

    δ = 0 allows only pure ε-DP statements (Laplace noise); Gaussian noise needs δ > 0.
    """

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        epsilon = check_number("Budget epsilon", self.epsilon, MIN_EPSILON, MAX_EPSILON, why=_EPSILON_RANGE)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", check_number("Budget delta", self.delta, 0.0, 1.0, high_open=True))

    @classmethod
    def of(cls, value: object) -> Budget:
        """``value`` as a budget: a :class:`Budget`, a mapping ``{"epsilon": ..., "delta": ...}`` (δ
        optional) or a number, read as ε with δ = 0."""
        if isinstance(value, Budget):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(str(key) for key in value if key not in ("epsilon", "delta"))
            if unknown or "epsilon" not in value:
                raise ProgrammingError(f"budget {dict(value)!r}: write {{'epsilon': 1.0, 'delta': 1e-6}} "
                                       "(keys epsilon and, optionally, delta)")
            return cls(value["epsilon"], value.get("delta", 0.0))
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return cls(float(value))
        raise ProgrammingError(f"budget must be a dpsql.Budget(epsilon=..., delta=...), a mapping with those keys "
                               f"or a number (epsilon), not {type(value).__name__}")

    @property
    def rho(self) -> float:
        """The largest ρ whose zCDP→(ε, δ) conversion fits in this budget (0 when δ = 0)."""
        if self.delta == 0:
            return 0.0
        log_term = -math.log(self.delta)
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
        epsilon = check_number("epsilon", epsilon, MIN_EPSILON, MAX_EPSILON, why=_EPSILON_RANGE)
        return cls("laplace", epsilon**2 / 2, epsilon)

    @classmethod
    def zcdp(cls, rho: float) -> Cost:
        why = f" (ε²/2 for ε in [{MIN_EPSILON:g}, {MAX_EPSILON:g}])"
        return cls("gaussian", check_number("rho", rho, MIN_RHO, MAX_RHO, why=why))

    @classmethod
    def combined(cls, costs: list[Cost]) -> Cost:
        """The sequential composition of costs of one mechanism, as a single charge."""
        pure = all(c.epsilon is not None for c in costs)
        epsilon = sum(c.epsilon for c in costs) if pure else None  # type: ignore[misc]
        approximate = sum(c.approximate_epsilon for c in costs), sum(c.delta for c in costs)
        return cls(costs[0].mechanism, sum(c.rho for c in costs), epsilon, *approximate)


def decimal(value: float) -> float:
    """``value`` as the nearest decimal of 12 significant digits: budgets read as the decimals they were
    given in (``0.65``, not the ``0.6499999999999999`` of a floating-point difference). The ledger keeps
    exact sums; 12 digits stay within its comparison slack (:data:`TOLERANCE`) for every ε it accepts."""
    return float(f"{value:.12g}") if math.isfinite(value) else value


class Remaining(float):
    """What is left: a float (the ε left) that also carries ``epsilon``, ``delta`` and ``rho``.

    ``rho`` is the zCDP budget left for Gaussian statements (0 when δ = 0: a pure-ε budget has no ρ to
    spend, and its repr shows none).
    """

    epsilon: float
    delta: float
    rho: float

    def __new__(cls, epsilon: float, delta: float, rho: float) -> Remaining:
        epsilon, delta, rho = decimal(epsilon), decimal(delta), decimal(rho)
        value = super().__new__(cls, epsilon)
        value.epsilon, value.delta, value.rho = epsilon, delta, rho
        return value

    def __repr__(self) -> str:
        rho = f", rho={self.rho!r}" if self.delta > 0 else ""
        return f"Remaining(epsilon={self.epsilon!r}, delta={self.delta!r}{rho})"


@dataclass(frozen=True)
class Spent:
    """The (ε, δ) spent so far (the better of the two accountings), the zCDP total, and the count.

    ``zcdp`` says whether the budget has a δ for zCDP at all; without one ``rho`` (the pure charges'
    ε²/2) is bookkeeping only, and the repr leaves it out."""

    epsilon: float
    delta: float
    rho: float
    statements: int
    zcdp: bool = dataclasses.field(default=True, compare=False)

    def __post_init__(self) -> None:
        for name in ("epsilon", "delta", "rho"):
            object.__setattr__(self, name, decimal(getattr(self, name)))

    def __repr__(self) -> str:
        rho = f", rho={self.rho!r}" if self.zcdp else ""
        return f"Spent(epsilon={self.epsilon!r}, delta={self.delta!r}{rho}, statements={self.statements})"


@dataclass(frozen=True)
class Totals:
    """Exact sums over charges: what the ledger keeps running, and all that spending depends on."""

    statements: int = 0
    rho: Fraction = Fraction(0)  # every charge's ρ (pure ones count ε²/2)
    pure_epsilon: Fraction = Fraction(0)  # ε of the pure charges
    gaussian_rho: Fraction = Fraction(0)  # ρ of the zCDP charges
    approximate_epsilon: Fraction = Fraction(0)
    delta: Fraction = Fraction(0)

    @classmethod
    def of(cls, costs: Iterable[Cost]) -> Totals:
        totals = cls()
        for cost in costs:
            totals = totals.plus(cost)
        return totals

    def plus(self, cost: Cost) -> Totals:
        pure = cost.epsilon is not None
        return Totals(
            self.statements + 1,
            self.rho + Fraction(cost.rho),
            self.pure_epsilon + (Fraction(cost.epsilon) if pure else 0),  # type: ignore[arg-type]
            self.gaussian_rho + (0 if pure else Fraction(cost.rho)),
            self.approximate_epsilon + Fraction(cost.approximate_epsilon),
            self.delta + Fraction(cost.delta),
        )

    def spent(self, budget: Budget) -> Spent:
        """The (ε, δ) these charges spend under ``budget``'s δ."""
        rho_total = float(self.rho)
        if self.gaussian_rho == 0:
            return Spent(float(self.pure_epsilon + self.approximate_epsilon), float(self.delta), rho_total, self.statements, budget.delta > 0)
        conversion_delta = Fraction(budget.delta) - self.delta
        if conversion_delta <= 0:
            return Spent(math.inf, max(budget.delta, float(self.delta)), rho_total, self.statements, budget.delta > 0)
        log_term = math.log(conversion_delta.denominator) - math.log(conversion_delta.numerator)
        gaussian_rho = float(self.gaussian_rho)
        all_zcdp = rho_total + 2 * math.sqrt(rho_total * log_term)
        split = float(self.pure_epsilon) + gaussian_rho + 2 * math.sqrt(gaussian_rho * log_term)
        return Spent(min(all_zcdp, split) + float(self.approximate_epsilon), budget.delta, rho_total, self.statements, budget.delta > 0)


def spent_of(costs: list[Cost], budget: Budget) -> Spent:
    """Compose a list of costs into the (ε, δ) spent, under ``budget``'s δ."""
    return Totals.of(costs).spent(budget)


@dataclass(frozen=True)
class Charge:
    """One charge recorded in a ledger (:meth:`Ledger.history`)."""

    number: int  # the charge's id in the ledger (what :meth:`Ledger.charge` returned)
    time: datetime  # when it was charged (UTC)
    statement: str
    mechanism: str  # "laplace" (pure ε) or "gaussian" (ρ-zCDP)
    epsilon: float | None  # ε of a pure charge, else None
    rho: float
    approximate_epsilon: float  # the (ε, δ)-DP part (partition selection)
    delta: float

    @property
    def cost(self) -> Cost:
        return Cost(self.mechanism, self.rho, self.epsilon, self.approximate_epsilon, self.delta)


def _scaled(value: float) -> int:
    """``value``·2^1074 exactly (an integer for every double)."""
    numerator, denominator = value.as_integer_ratio()
    return numerator << (_EXACT_SCALE_BITS - denominator.bit_length() + 1)


def _checked_row(number: int, row: tuple[object, ...]) -> tuple[str, str, float | None, float, float, float, str]:
    """A stored charge (columns of :data:`ledger_format.CHARGE_COLUMNS`), or an :class:`IntegrityError`."""
    at, mechanism, epsilon, rho, approximate_epsilon, delta, statement = row

    def number_ok(value: object) -> bool:
        return isinstance(value, float) and math.isfinite(value) and value >= 0

    problems = []
    if not isinstance(at, str) or not _is_time(at):
        problems.append(f"time {at!r}")
    if mechanism not in _MECHANISMS:
        problems.append(f"mechanism {mechanism!r}")
    if not (epsilon is None or number_ok(epsilon)):
        problems.append(f"epsilon {epsilon!r}")
    for name, value in (("rho", rho), ("approximate_epsilon", approximate_epsilon), ("delta", delta)):
        if not number_ok(value):
            problems.append(f"{name} {value!r}")
    if not isinstance(statement, str):
        problems.append(f"statement {statement!r}")
    if problems:
        raise IntegrityError(f"charge #{number} of the ledger is corrupt ({', '.join(problems)}); restore the file from a backup")
    return row  # type: ignore[return-value]


def _is_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class _State:
    """A ledger's running totals row: the totals, the chain value and sequence number (id) of its last
    charge, and the digest of all of these."""

    totals: Totals
    head: str
    last_charge: int
    digest: str


@dataclass(eq=False)
class _Pending:
    """A charge waiting for the commit of its group: its outcome, set when that commit is durable."""

    cost: Cost
    fields: tuple[object, ...]  # the charge's row, in the order of ledger_format.CHARGE_COLUMNS
    number: int | None = None
    error: Error | None = None
    done: bool = False


class Ledger:
    """Durable record of the charges against one budget (SQLite; ``path=None`` keeps it in memory).

    A new file is created only where no file exists (and no ledger of that name was registered in its
    directory before: :mod:`dpsql.ledger_registry`); an existing one must be a ledger whose running
    totals are intact and whose last charge continues what its directory's registry recorded, else
    :class:`IntegrityError` says what is wrong. Opening takes the same time at any length of history.
    """

    def __init__(self, path: str | Path | None, budget: Budget | Mapping[str, float] | float | None) -> None:
        budget = None if budget is None else Budget.of(budget)
        self.path = None if path is None else str(path)
        self._lock = threading.Lock()  # the database connection: one transaction at a time
        self._group = threading.Condition()  # charges waiting for a commit, and whether one is under way
        self._waiting: list[_Pending] = []
        self._committing = False
        self._registry: Registry | None = None
        self._name = ""
        self._db: sqlite3.Connection | None = None
        try:
            self.budget, self.ledger_id = self._open(None if path is None else Path(path), budget)
        except BaseException:
            self.close()
            raise

    def _open(self, file: Path | None, budget: Budget | None) -> tuple[Budget, str]:
        registered = None
        if file is not None:
            resolved = file.resolve()
            if not resolved.parent.is_dir():
                raise OperationalError(f"cannot open the budget ledger {self.path!r}: its directory {str(resolved.parent)!r} does not exist")
            self._registry, self._name = Registry(resolved.parent), resolved.name
            registered = self._registry.checkpoint(self._name)  # read before the file, which is never behind it
            if not file.exists():
                self._create(file, budget, registered)
        try:
            self._db = self._connect(file)
            if file is None:
                with self._transaction():
                    _initialize(self._db, _new_budget(budget), uuid.uuid4().hex, _now())
            return self._verified(budget, registered)
        except sqlite3.Error as error:
            raise self._opening_error(error) from error

    def _opening_error(self, error: sqlite3.Error) -> OperationalError | IntegrityError:
        if isinstance(error, sqlite3.OperationalError) or not isinstance(error, sqlite3.DatabaseError):  # locked, I/O
            return OperationalError(f"cannot open the budget ledger {self.path!r}: {error}")
        return IntegrityError(f"{self.path!r} is not a readable dpsql budget ledger: {error}")  # not a database, malformed

    def _connect(self, file: Path | None) -> sqlite3.Connection:
        if file is not None and file.is_file() and file.stat().st_size == 0:
            raise IntegrityError(
                f"the budget ledger {self.path!r} is empty (0 bytes): its history is gone, so what it spent cannot "
                "be known. Restore it from a backup; dpsql never starts a new budget over an existing file (choose a "
                "new path to start one on purpose)"
            )
        database = sqlite3.connect(
            ":memory:" if file is None else str(file), timeout=LOCK_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
        )
        database.text_factory = _text  # a damaged text reads as what it is, and fails the checks
        try:
            database.execute("PRAGMA synchronous=FULL")
            database.execute("PRAGMA busy_timeout=%d" % int(LOCK_TIMEOUT_SECONDS * 1000))
        except sqlite3.Error:
            database.close()
            raise
        return database

    @property
    def _database(self) -> sqlite3.Connection:
        if self._db is None:
            raise OperationalError(f"the budget ledger {self.path!r} is not open")
        return self._db

    def _create(self, file: Path, budget: Budget | None, registered: Checkpoint | None) -> None:
        """Create the ledger file, unless a ledger was registered at this path before and its file is gone."""
        if registered is not None:
            assert self._registry is not None
            raise IntegrityError(
                f"the budget ledger {self.path!r} is gone: ledger {registered.ledger_id} was created at this path on "
                f"{registered.created_at}, and without its file what it spent cannot be known. Restore the file from a "
                f"backup; to start a new budget on purpose, use a new path (or run sqlite3 {str(self._registry.path)!r} "
                f"\"DELETE FROM ledgers WHERE name = '{self._name}'\")"
            )
        checked = _new_budget(budget)
        ledger_id, created_at = uuid.uuid4().hex, _now()
        ledger_format.create_exclusively(file, lambda database: _initialize(database, checked, ledger_id, created_at))

    def _verified(self, budget: Budget | None, registered: Checkpoint | None) -> tuple[Budget, str]:
        """Check, in constant time, that the file is an intact ledger (upgrading an older format after
        checking its whole history) that continues ``registered``, and that ``budget`` (if given) is its
        budget; record its checkpoint in the registry. Returns the budget and the ledger id."""
        version = self._file_version()
        if version < ledger_format.FORMAT_VERSION:
            is_ledger = version > 1 or "meta" in self._tables()  # else upgrading says what it is
            if registered is not None and registered.format > version and is_ledger:
                raise ledger_registry.downgraded(self.path or "", self._registry_path, registered, version)
            self._upgrade()
        with self._transaction(write=False):
            self.ledger_id, created_at, stored = self._header()
            state = self._intact_state()
            chain_at = None if registered is None else self._chain_at(registered.last_charge, state)
        found = Checkpoint(self.ledger_id, created_at, ledger_format.FORMAT_VERSION, state.last_charge, state.head, state.digest)
        if registered is not None:
            ledger_registry.compare(self.path or "", self._registry_path, registered, found, chain_at)
        if budget is not None and budget != stored:
            raise IntegrityError(
                f"the ledger {self.path!r} was created with budget (epsilon={stored.epsilon}, "
                f"delta={stored.delta}); pass that budget, or omit it, or start a new ledger"
            )
        if self._registry is not None:
            self._registry.record(self._name, found)
        self._created_at = created_at
        return stored, self.ledger_id

    @property
    def _registry_path(self) -> Path:
        return Path() if self._registry is None else self._registry.path

    def _file_version(self) -> int:
        """1 for a file without dpsql's application id (format 1, or not a ledger), else its header's version."""
        database = self._database
        if database.execute("PRAGMA application_id").fetchone()[0] != ledger_format.APPLICATION_ID:
            return 1
        version = database.execute("PRAGMA user_version").fetchone()[0]
        return version if isinstance(version, int) else 0

    def _tables(self) -> set[str]:
        return {row[0] for row in self._database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _header(self) -> tuple[str, str, Budget]:
        missing = {"header", "charges", "totals"} - self._tables()
        if missing:
            raise IntegrityError(
                f"the budget ledger {self.path!r} has lost its table(s) {sorted(missing)}: its history is gone, so "
                "what it spent cannot be known. Restore the file from a backup"
            )
        rows = self._database.execute("SELECT format, version, ledger_id, created_at, budget_epsilon, budget_delta FROM header").fetchall()
        if len(rows) != 1 or rows[0][0] != ledger_format.FORMAT_NAME or not isinstance(rows[0][2], str):
            raise IntegrityError(f"the budget ledger {self.path!r} has a corrupt header ({_shown(rows)}); restore it from a backup")
        _, version, ledger_id, created_at, epsilon, delta = rows[0]
        if version != ledger_format.FORMAT_VERSION:
            newer = isinstance(version, int) and version > ledger_format.FORMAT_VERSION
            raise IntegrityError(
                f"the budget ledger {self.path!r} has format version {version!r} in its header; this dpsql reads version "
                f"{ledger_format.FORMAT_VERSION} ({'a newer dpsql wrote it?' if newer else 'the header was edited outside dpsql'})"
            )
        try:
            return ledger_id, str(created_at), Budget(epsilon, delta)
        except ProgrammingError as error:
            raise IntegrityError(f"the budget ledger {self.path!r} records an invalid budget: {error}") from None

    def _intact_state(self) -> _State:
        """The running totals, checked in constant time: their digest, and the last charge — the one they
        name, chained from the charge before it, with the chain value they hold."""
        state = self._read_state()
        rows = self._database.execute(
            f"SELECT id, {ledger_format.CHARGE_COLUMNS}, chain FROM charges ORDER BY id DESC LIMIT 2"
        ).fetchall()
        last = rows[0][0] if rows else 0
        if last != state.last_charge or (last == 0) != (state.totals.statements == 0):
            raise IntegrityError(
                f"the budget ledger {self.path!r} ends at charge #{last}, but its running totals end at charge "
                f"#{state.last_charge} ({state.totals.statements} charge(s)): charges were deleted or added outside dpsql. "
                "Restore the file from a backup"
            )
        if rows:
            number, *fields, link = rows[0]
            _checked_row(number, tuple(fields))
            previous = rows[1][-1] if len(rows) > 1 else ledger_format.genesis(self.ledger_id)
            if link != state.head or ledger_format.chained(previous, tuple(fields)) != link:
                raise self._broken_chain(number)
        elif state.head != ledger_format.genesis(self.ledger_id):
            raise IntegrityError(f"the budget ledger {self.path!r} has no charges, but its running totals name a last one")
        return state

    def _chain_at(self, charge: int, state: _State) -> str | None:
        """The chain value of charge number ``charge`` ('' if there is none; the genesis value for 0)."""
        if charge == ledger_registry.UNKNOWN:
            return None
        if charge == state.last_charge:
            return state.head
        if charge == 0:
            return ledger_format.genesis(self.ledger_id)
        row = self._database.execute("SELECT chain FROM charges WHERE id = ?", (charge,)).fetchone()
        return "" if row is None else str(row[0])

    def _broken_chain(self, number: int) -> IntegrityError:
        return IntegrityError(
            f"charge #{number} of the budget ledger {self.path!r} breaks its checksum chain: the history was "
            "altered, reordered or partly deleted outside dpsql. Restore the file from a backup"
        )

    def verify_history(self) -> int:
        """Re-check the whole history against the running totals (every charge's fields and checksum
        chain: time linear in the history's length); an :class:`IntegrityError` says what differs.
        Returns the number of charges checked."""
        with self._lock, self._transaction(write=False):
            try:
                state = self._read_state()
                self._check_history(self._header()[0], state.totals, state.head, state.last_charge)
            except sqlite3.Error as error:
                raise IntegrityError(f"the budget ledger {self.path!r} cannot be read to the end: {error}") from error
        return state.totals.statements

    def _check_history(self, ledger_id: str, totals: Totals, head: str, last_charge: int | None) -> int:
        """Refuse a history that does not add up to ``totals`` and chain to ``head`` (and end at charge
        ``last_charge``, when it is known); returns the id of its last charge."""
        recorded, history, last = self._history_totals(ledger_id)
        if (totals, head) != (recorded, history) or last_charge not in (None, last):
            raise IntegrityError(
                f"the budget ledger {self.path!r} does not match its own running totals ({totals.statements} "
                f"charge(s) recorded, {recorded.statements} in its history, checksums "
                f"{'equal' if head == history else 'different'}): charges were deleted, added or altered outside "
                "dpsql. Restore the file from a backup"
            )
        return last

    def _history_totals(self, ledger_id: str) -> tuple[Totals, str, int]:
        """The exact totals, the chain value and the last charge id of the whole history, checking every charge."""
        head = ledger_format.genesis(ledger_id)
        count = last = 0
        sums = [0, 0, 0, 0, 0]  # rho, pure epsilon, gaussian rho, approximate epsilon, delta (·2^1074)
        rows = self._database.execute(f"SELECT id, {ledger_format.CHARGE_COLUMNS}, chain FROM charges ORDER BY id")
        for number, *fields, link in rows:
            _, mechanism, epsilon, rho, approximate_epsilon, delta, _ = _checked_row(number, tuple(fields))
            head = ledger_format.chained(head, tuple(fields))
            if link != head:
                raise self._broken_chain(number)
            count, last = count + 1, number
            sums[0] += _scaled(rho)
            if mechanism == "laplace":
                sums[1] += _scaled(epsilon)  # type: ignore[arg-type]
            else:
                sums[2] += _scaled(rho)
            sums[3] += _scaled(approximate_epsilon)
            sums[4] += _scaled(delta)
        exact = [Fraction(total, 1 << _EXACT_SCALE_BITS) for total in sums]
        return Totals(count, *exact), head, last

    def _read_state(self) -> _State:
        row = self._totals_row(f"{_TOTALS_COLUMNS}, last_charge, digest")
        count, head, *sums, last_charge, digest = row
        if not isinstance(last_charge, int):
            raise IntegrityError(f"the budget ledger {self.path!r} has corrupt running totals ({_shown(row)})")
        totals = self._parsed_totals(row[:7])
        if digest != ledger_format.state_digest(self.ledger_id, last_charge, count, head, tuple(sums)):
            raise IntegrityError(
                f"the budget ledger {self.path!r} has running totals that do not match their digest: they were edited "
                "outside dpsql. Restore the file from a backup"
            )
        return _State(totals, head, last_charge, digest)

    def _totals_row(self, columns: str) -> tuple[object, ...]:
        try:
            rows = self._database.execute(f"SELECT {columns} FROM totals").fetchall()
        except sqlite3.OperationalError as error:
            if "no such" not in str(error):
                raise
            raise IntegrityError(f"the budget ledger {self.path!r} has lost its running totals: {error}") from error
        if len(rows) != 1 or not isinstance(rows[0][0], int) or not isinstance(rows[0][1], str):
            raise IntegrityError(f"the budget ledger {self.path!r} has corrupt running totals ({_shown(rows)})")
        return tuple(rows[0])

    def _parsed_totals(self, row: tuple[object, ...]) -> Totals:
        """The exact totals of a row of :data:`_TOTALS_COLUMNS`."""
        count, _, *sums = row
        names = ("rho", "pure_epsilon", "gaussian_rho", "approximate_epsilon", "delta")
        return Totals(count, *(ledger_format.exact_value(text, name) for text, name in zip(sums, names)))  # type: ignore[arg-type]

    def _upgrade(self) -> None:
        """Bring a ledger of an older format to this one, in one transaction, after checking its history."""
        with self._transaction():
            now = self._file_version()
            if now == ledger_format.FORMAT_VERSION:
                return  # another process upgraded it meanwhile
            if now == 1:
                self._upgrade_format_1()
            elif now == 2:
                self._upgrade_format_2()
            else:
                raise IntegrityError(f"the budget ledger {self.path!r} has format version {now!r}, which no dpsql wrote")

    def _upgrade_format_1(self) -> None:
        """Give a ledger of format 1 (a ``meta`` table with the budget, charges without checksums) its
        header, chain and totals; anything else is not a ledger."""
        tables = self._tables()
        if "meta" not in tables:
            gone = "it has no tables: its history is gone" if not tables else "it is not a dpsql budget ledger"
            raise IntegrityError(
                f"{self.path!r} exists but {gone}. Restore the ledger from a backup; dpsql never starts a new budget "
                "over an existing file (choose a new path to start one on purpose)"
            )
        if "charges" not in tables:
            raise IntegrityError(
                f"the budget ledger {self.path!r} has lost its charges table: its history is gone, so what it spent "
                "cannot be known. Restore the file from a backup"
            )
        database = self._database
        stored = dict(database.execute("SELECT key, value FROM meta").fetchall())
        try:
            budget = Budget(stored["budget_epsilon"], stored["budget_delta"])
        except (KeyError, ProgrammingError) as error:
            raise IntegrityError(f"the budget ledger {self.path!r} has a corrupt budget record ({error})") from None
        present = {row[1] for row in database.execute("PRAGMA table_info(charges)")}
        for column in ("approximate_epsilon", "delta"):  # ledgers written before the approximate part
            if column not in present:
                database.execute(f"ALTER TABLE charges ADD COLUMN {column} REAL NOT NULL DEFAULT 0")
        database.execute("ALTER TABLE charges ADD COLUMN chain TEXT NOT NULL DEFAULT ''")
        self.ledger_id = uuid.uuid4().hex
        _initialize(database, budget, self.ledger_id, _now(), charges_table=False)
        head, totals, last = ledger_format.genesis(self.ledger_id), Totals(), 0
        rows = database.execute(f"SELECT id, {ledger_format.CHARGE_COLUMNS} FROM charges ORDER BY id").fetchall()
        for number, *fields in rows:
            _, mechanism, epsilon, rho, approximate_epsilon, delta, _ = _checked_row(number, tuple(fields))
            head = ledger_format.chained(head, tuple(fields))
            database.execute("UPDATE charges SET chain = ? WHERE id = ?", (head, number))
            totals, last = totals.plus(Cost(mechanism, rho, epsilon, approximate_epsilon, delta)), number
        self._write_state(totals, head, last)
        database.execute("DROP TABLE meta")

    def _upgrade_format_2(self) -> None:
        """Give a ledger of format 2 the sequence number and digest of its totals, once its whole history
        matches them."""
        database = self._database
        self.ledger_id = self._header_id()
        columns = [row[1] for row in database.execute("PRAGMA table_info(totals)")]
        if columns != ["charges", "head", "rho", "pure_epsilon", "gaussian_rho", "approximate_epsilon", "delta"]:
            raise IntegrityError(f"the budget ledger {self.path!r} has corrupt running totals (columns {columns})")
        for column in ledger_format.TOTALS_ADDED_IN_3:
            database.execute(f"ALTER TABLE totals ADD COLUMN {column}")
        row = self._totals_row(_TOTALS_COLUMNS)
        totals, head = self._parsed_totals(row), str(row[1])
        last = self._check_history(self.ledger_id, totals, head, None)
        self._write_state(totals, head, last)
        database.execute("UPDATE header SET version = ?", (ledger_format.FORMAT_VERSION,))
        database.execute(f"PRAGMA user_version = {ledger_format.FORMAT_VERSION}")

    def _header_id(self) -> str:
        rows = self._database.execute("SELECT format, ledger_id FROM header").fetchall() if "header" in self._tables() else []
        if len(rows) != 1 or rows[0][0] != ledger_format.FORMAT_NAME or not isinstance(rows[0][1], str):
            raise IntegrityError(f"the budget ledger {self.path!r} has a corrupt header ({_shown(rows)}); restore it from a backup")
        return rows[0][1]

    def _write_state(self, totals: Totals, head: str, last_charge: int) -> _State:
        exact = (totals.rho, totals.pure_epsilon, totals.gaussian_rho, totals.approximate_epsilon, totals.delta)
        sums = tuple(ledger_format.exact_text(value) for value in exact)
        digest = ledger_format.state_digest(self.ledger_id, last_charge, totals.statements, head, sums)
        self._database.execute(
            "UPDATE totals SET charges = ?, head = ?, rho = ?, pure_epsilon = ?, gaussian_rho = ?, approximate_epsilon = ?, "
            "delta = ?, last_charge = ?, digest = ?",
            (totals.statements, head, *sums, last_charge, digest),
        )
        return _State(totals, head, last_charge, digest)

    @contextmanager
    def _transaction(self, write: bool = True) -> Iterator[None]:
        """A transaction; a write one takes the database's write lock at once, so readers see no half-state."""
        database = self._database
        database.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield
        except BaseException:
            database.execute("ROLLBACK")
            raise
        database.execute("COMMIT")

    def _refusal(self, totals: Totals, cost: Cost) -> BudgetExceededError | None:
        after_totals = totals.plus(cost)
        if cost.delta > 0 and float(after_totals.delta) > self.budget.delta * (1 + TOLERANCE):
            return BudgetExceededError(
                f"the statement (delta={cost.delta:g}) would spend more delta than the budget has left: "
                f"spent delta={float(totals.delta):.6g} of {self.budget.delta:g}; use a smaller "
                "connection.selection_delta or start a new budget"
            )
        after = after_totals.spent(self.budget)
        if after.epsilon <= self.budget.epsilon + TOLERANCE:
            return None
        if cost.epsilon is None and self.budget.delta == 0:
            return BudgetExceededError("Gaussian noise needs a budget with delta > 0; this budget has delta = 0")
        asked = f"epsilon={cost.epsilon:g}" if cost.epsilon is not None else f"rho={cost.rho:g}"
        if cost.approximate_epsilon:
            asked += f" and selection epsilon={cost.approximate_epsilon:g}"
        return BudgetExceededError(
            f"the statement ({asked}) would spend more than the budget has left: spent epsilon="
            f"{totals.spent(self.budget).epsilon:.6g} of {self.budget.epsilon:g} (after it: {after.epsilon:.6g}); "
            "ask for less or start a new budget"
        )

    def _totals(self) -> Totals:
        """The running totals, read under the lock (one row: the same cost at any length of history)."""
        with self._lock:
            try:
                return self._read_state().totals
            except sqlite3.Error as error:
                raise OperationalError(f"cannot read the budget ledger: {error}") from error

    def check(self, cost: Cost) -> None:
        """Raise :class:`BudgetExceededError` if ``cost`` would not fit now (reads the ledger only)."""
        refusal = self._refusal(self._totals(), cost)
        if refusal is not None:
            raise refusal

    def charge(self, cost: Cost, statement: str) -> int:
        """Atomically check and record ``cost``; durable (fsynced) when this returns, and recorded in the
        registry. Refused (nothing recorded) if it does not fit beside every charge committed before it or
        in its group, or if the file has fallen behind its registered checkpoint since it was opened.
        Returns the charge id, the ledger's new sequence number.

        Charges made at once on this object from several threads commit in groups (module doc): the caller
        that finds no group committing commits every charge waiting, in one transaction; the others wait
        for it, and each returns only after the commit that holds its own charge."""
        epsilon = None if cost.epsilon is None else float(cost.epsilon)
        stored = Cost(cost.mechanism, float(cost.rho), epsilon, float(cost.approximate_epsilon), float(cost.delta))
        with self._group:
            pending = _Pending(stored, (_now(), stored.mechanism, stored.epsilon, stored.rho, stored.approximate_epsilon, stored.delta, str(statement)))
            self._waiting.append(pending)
            while self._committing and not pending.done:
                self._group.wait()
            leads = not pending.done
            if leads:
                group, self._waiting, self._committing = self._waiting, [], True
        if leads:
            try:
                self._commit_group(group)
            finally:
                with self._group:
                    for member in group:  # an interrupted leader leaves no member waiting for ever
                        if not member.done:
                            member.error = member.error or OperationalError("the budget ledger's commit was interrupted; the statement may have been charged")
                            member.done = True
                    self._committing = False
                    self._group.notify_all()
        if pending.error is not None:
            raise pending.error
        assert pending.number is not None
        return pending.number

    def _commit_group(self, group: list[_Pending]) -> None:
        """Record every charge of ``group`` that fits, in order, in one transaction (one fsync); then move the
        registry's checkpoint to the group's last charge. Each member learns its charge id or its refusal
        only then; when the transaction or the registry fails, every member gets the error."""
        accepted: list[tuple[_Pending, int]] = []
        try:
            with self._lock:
                try:
                    with self._transaction():
                        state = self._read_state()
                        self._check_registered(state)
                        totals, head, number = state.totals, state.head, state.last_charge
                        for member in group:
                            member.error = self._refusal(totals, member.cost)
                            if member.error is not None:
                                continue
                            head = ledger_format.chained(head, member.fields)
                            cursor = self._database.execute(
                                f"INSERT INTO charges ({ledger_format.CHARGE_COLUMNS}, chain) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                (*member.fields, head),
                            )
                            number = int(cursor.lastrowid)  # type: ignore[arg-type]
                            totals = totals.plus(member.cost)
                            accepted.append((member, number))
                        after = self._write_state(totals, head, number) if accepted else None
                except sqlite3.Error as error:
                    raise OperationalError(f"cannot write the budget ledger: {error}") from error
                if after is not None and self._registry is not None:
                    self._registry.record(self._name, self._checkpoint(after))
        except Error as error:
            with self._group:
                for member in group:
                    member.error, member.done = type(error)(*error.args), True  # one exception object per caller's thread
            return
        with self._group:
            for member, number in accepted:
                member.number = number
            for member in group:
                member.done = True

    def _checkpoint(self, state: _State) -> Checkpoint:
        return Checkpoint(self.ledger_id, self._created_at, ledger_format.FORMAT_VERSION, state.last_charge, state.head, state.digest)

    def _check_registered(self, state: _State) -> None:
        """Refuse to charge a file that was replaced or rolled back under an open ledger (constant time:
        a registry behind the file, by another process's charge, is not followed into the history)."""
        if self._registry is None:
            return
        registered = self._registry.checkpoint(self._name)
        if registered is not None:
            chain_at = state.head if registered.last_charge == state.last_charge else None
            ledger_registry.compare(self.path or "", self._registry.path, registered, self._checkpoint(state), chain_at)

    def spent(self) -> Spent:
        return self._totals().spent(self.budget)

    def remaining(self) -> Remaining:
        """What is left; ``delta`` is the budget's δ less what (ε, δ) charges (partition selection) spent."""
        totals = self._totals()
        spent = totals.spent(self.budget)
        if totals.gaussian_rho == 0:  # exact: the ledger's sums are exact fractions of the ε asked for
            epsilon_left = max(0.0, float(Fraction(self.budget.epsilon) - totals.pure_epsilon - totals.approximate_epsilon))
        else:
            epsilon_left = max(0.0, self.budget.epsilon - spent.epsilon)
        rho_left = max(0.0, self.budget.rho - spent.rho) if self.budget.delta > 0 else 0.0
        return Remaining(epsilon_left, max(0.0, self.budget.delta - float(totals.delta)), rho_left)

    def history(self) -> list[Charge]:
        """Every charge, oldest first: time, statement, mechanism, ε, ρ, approximate ε and δ."""
        with self._lock:
            try:
                rows = self._database.execute(f"SELECT id, {ledger_format.CHARGE_COLUMNS} FROM charges ORDER BY id").fetchall()
            except sqlite3.Error as error:
                raise OperationalError(f"cannot read the budget ledger: {error}") from error
        charges = []
        for number, *fields in rows:
            at, mechanism, epsilon, rho, approximate_epsilon, delta, statement = _checked_row(number, tuple(fields))
            charges.append(Charge(number, datetime.fromisoformat(at), statement, mechanism, epsilon, rho, approximate_epsilon, delta))
        return charges

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
            if self._registry is not None:
                self._registry.close()


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _new_budget(budget: Budget | None) -> Budget:
    if budget is None:
        raise ProgrammingError("a new ledger needs a budget: connect(budget=dpsql.Budget(epsilon=..., delta=...))")
    return budget


def _initialize(database: sqlite3.Connection, budget: Budget, ledger_id: str, created_at: str, charges_table: bool = True) -> None:
    """Write a new ledger's identification, tables, header and zero totals (inside a transaction)."""
    database.execute(f"PRAGMA application_id = {ledger_format.APPLICATION_ID}")
    database.execute(f"PRAGMA user_version = {ledger_format.FORMAT_VERSION}")
    for statement in ledger_format.TABLES:
        if charges_table or not statement.startswith("CREATE TABLE charges"):
            database.execute(statement)
    database.execute(
        "INSERT INTO header VALUES (?, ?, ?, ?, ?, ?)",
        (ledger_format.FORMAT_NAME, ledger_format.FORMAT_VERSION, ledger_id, created_at, budget.epsilon, budget.delta),
    )
    zeros = (ledger_format.exact_text(Fraction(0)),) * 5
    head = ledger_format.genesis(ledger_id)
    digest = ledger_format.state_digest(ledger_id, 0, 0, head, zeros)
    database.execute("INSERT INTO totals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (0, head, *zeros, 0, digest))
