"""The budget ledger's file: how it says what it is, how it is created, how its history is chained.

A ledger file is a SQLite database (format version :data:`FORMAT_VERSION`; versions 1 and 2 are
upgraded when first opened):

* ``PRAGMA application_id`` = :data:`APPLICATION_ID` ("dpsq") and ``PRAGMA user_version`` = the format
  version, so the file identifies itself to any SQLite tool;
* table ``header`` (one row): the format name, its version, the ledger's random id, when it was
  created, and the budget (ε, δ);
* table ``charges``: one row per charge. Its ``chain`` column is SHA-256 over the previous row's chain
  and this row's fields (the first row chains from the ledger's id), so the last chain value is a
  checksum of the whole history in order;
* table ``totals`` (one row): the number of charges, the last chain value, the exact sums of the
  charges (rationals written as ``numerator/denominator``: every float is a dyadic rational, so the
  sums are exact), the id of the last charge (its *sequence number*) and a digest of all of these
  (:func:`state_digest`). It is updated in the same transaction as each charge, so a budget check
  reads one row. Opening a ledger checks, in constant time, that the digest matches the totals and
  that the last charge is the one the totals name and chains from the charge before it; the whole
  history is re-checked against the totals when a ledger of an older format is upgraded, and on demand
  (:meth:`dpsql.accountant.Ledger.verify_history`).

New files are created readable and writable by their owner only (``0600``: they hold every
statement's text), fully initialized in a temporary file and then linked into place, so no process
ever sees a half-made ledger, and an existing path is never overwritten. Each directory that holds a
ledger also keeps a registry of the ledgers in it (:mod:`dpsql.ledger_registry`): a second durable
record of each ledger's id, format and last charge, against which a deleted, replaced, downgraded or
rolled-back file is refused.

The checksums are not keyed: they guard against accidents and naive resets (a truncated, deleted or
edited file, a dropped table), not against someone who can rewrite the file and recompute them. The
registry catches an older copy or another ledger put in a file's place. Keep ledgers where analysts
cannot write (a served deployment, ``dpsql serve``, holds them on the server).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import tempfile
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

from dpsql.errors import IntegrityError, OperationalError

APPLICATION_ID = 0x64707371  # "dpsq"
FORMAT_NAME = "dpsql-ledger"
FORMAT_VERSION = 3

TABLES = (
    "CREATE TABLE header (format TEXT NOT NULL, version INTEGER NOT NULL, ledger_id TEXT NOT NULL, "
    "created_at TEXT NOT NULL, budget_epsilon REAL NOT NULL, budget_delta REAL NOT NULL)",
    "CREATE TABLE charges (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, mechanism TEXT NOT NULL, "
    "epsilon REAL, rho REAL NOT NULL, statement TEXT NOT NULL, approximate_epsilon REAL NOT NULL DEFAULT 0, "
    "delta REAL NOT NULL DEFAULT 0, chain TEXT NOT NULL DEFAULT '')",
    "CREATE TABLE totals (charges INTEGER NOT NULL, head TEXT NOT NULL, rho TEXT NOT NULL, pure_epsilon TEXT NOT NULL, "
    "gaussian_rho TEXT NOT NULL, approximate_epsilon TEXT NOT NULL, delta TEXT NOT NULL, last_charge INTEGER NOT NULL, "
    "digest TEXT NOT NULL)",
)
TOTALS_ADDED_IN_3 = ("last_charge INTEGER NOT NULL DEFAULT 0", "digest TEXT NOT NULL DEFAULT ''")
CHARGE_COLUMNS = "at, mechanism, epsilon, rho, approximate_epsilon, delta, statement"  # chained, in this order


def genesis(ledger_id: str) -> str:
    """The chain value before the first charge."""
    return hashlib.sha256(f"{FORMAT_NAME}\n{ledger_id}".encode()).hexdigest()


def chained(previous: str, charge: tuple[object, ...]) -> str:
    """The chain value after ``charge`` (a row of :data:`CHARGE_COLUMNS`): SHA-256 of the previous
    value and the fields, floats exactly (hex), texts with their length (so no two rows encode alike)."""
    fields = "|".join(_field_text(value) for value in charge)
    return hashlib.sha256(f"{previous}\n{fields}".encode()).hexdigest()


def state_digest(ledger_id: str, last_charge: int, charges: int, head: str, sums: tuple[str, ...]) -> str:
    """The digest of a ledger's running totals (``sums`` as :func:`exact_text` wrote them) after its
    charge number ``last_charge``: what the totals row and the registry's checkpoint record."""
    text = "\n".join((f"{FORMAT_NAME}-state", ledger_id, str(last_charge), str(charges), head, *sums))
    return hashlib.sha256(text.encode()).hexdigest()


def _field_text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return value.hex()
    text = str(value)
    return f"{len(text)}:{text}"


def exact_text(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def exact_value(text: object, what: str) -> Fraction:
    """A total written by :func:`exact_text`; an :class:`IntegrityError` if it is not one."""
    try:
        if not isinstance(text, str):
            raise ValueError(text)
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise IntegrityError(f"the ledger's running total {what} is not an exact number ({text!r})") from None


def create_exclusively(path: Path, initialize: Callable[[sqlite3.Connection], None], what: str = "budget ledger") -> bool:
    """Create the SQLite file at ``path`` (mode 0600), initialized by ``initialize`` in a temporary
    file beside it and then hard-linked into place. False if ``path`` already existed (another process
    may have created it first): nothing is overwritten."""
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".creating", dir=path.parent)
    except OSError as error:
        raise OperationalError(f"cannot create the {what} {str(path)!r}: {error.strerror}") from error
    os.close(descriptor)  # mkstemp made it 0600; SQLite gives its journal the same mode
    try:
        database = sqlite3.connect(temporary, isolation_level=None)
        try:
            database.execute("PRAGMA synchronous=FULL")
            database.execute("BEGIN IMMEDIATE")
            initialize(database)
            database.execute("COMMIT")
        finally:
            database.close()
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        _sync_directory(path.parent)
        return True
    except sqlite3.Error as error:
        raise OperationalError(f"cannot create the {what} {str(path)!r}: {error}") from error
    except OSError as error:
        raise OperationalError(f"cannot create the {what} {str(path)!r}: {error.strerror}") from error
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _sync_directory(directory: Path) -> None:
    """Make a new directory entry durable (where the platform allows opening a directory)."""
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
