"""The budget ledger's file: how it says what it is, how it is created, how its history is chained.

A ledger file is a SQLite database (format version :data:`FORMAT_VERSION`):

* ``PRAGMA application_id`` = :data:`APPLICATION_ID` ("dpsq") and ``PRAGMA user_version`` = the format
  version, so the file identifies itself to any SQLite tool;
* table ``header`` (one row): the format name, its version, the ledger's random id, when it was
  created, and the budget (ε, δ);
* table ``charges``: one row per charge. Its ``chain`` column is SHA-256 over the previous row's chain
  and this row's fields (the first row chains from the ledger's id), so the last chain value is a
  checksum of the whole history in order;
* table ``totals`` (one row): the number of charges, the last chain value and the exact sums of the
  charges (rationals written as ``numerator/denominator``: every float is a dyadic rational, so the
  sums are exact). It is updated in the same transaction as each charge, so a budget check reads one
  row, and opening a ledger recomputes it from the history and refuses a ledger where they differ.

New files are created readable and writable by their owner only (``0600``: they hold every
statement's text), fully initialized in a temporary file and then linked into place, so no process
ever sees a half-made ledger, and an existing path is never overwritten. Each directory that holds a
ledger also keeps a small registry, :data:`REGISTRY_NAME`, of the ledgers created in it: a ledger
whose file was deleted is not silently re-created with a fresh budget.

This guards against accidents and naive resets (a truncated, deleted or edited file, a dropped
table), not against someone who can rewrite the file and recompute its checksums: keep the ledger
where analysts cannot write (a served deployment, ``dpsql serve``, holds it on the server).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from dpsql.errors import IntegrityError, OperationalError

APPLICATION_ID = 0x64707371  # "dpsq"
FORMAT_NAME = "dpsql-ledger"
FORMAT_VERSION = 2
REGISTRY_NAME = ".dpsql-ledgers"

TABLES = (
    "CREATE TABLE header (format TEXT NOT NULL, version INTEGER NOT NULL, ledger_id TEXT NOT NULL, "
    "created_at TEXT NOT NULL, budget_epsilon REAL NOT NULL, budget_delta REAL NOT NULL)",
    "CREATE TABLE charges (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, mechanism TEXT NOT NULL, "
    "epsilon REAL, rho REAL NOT NULL, statement TEXT NOT NULL, approximate_epsilon REAL NOT NULL DEFAULT 0, "
    "delta REAL NOT NULL DEFAULT 0, chain TEXT NOT NULL DEFAULT '')",
    "CREATE TABLE totals (charges INTEGER NOT NULL, head TEXT NOT NULL, rho TEXT NOT NULL, pure_epsilon TEXT NOT NULL, "
    "gaussian_rho TEXT NOT NULL, approximate_epsilon TEXT NOT NULL, delta TEXT NOT NULL)",
)
CHARGE_COLUMNS = "at, mechanism, epsilon, rho, approximate_epsilon, delta, statement"  # chained, in this order


def genesis(ledger_id: str) -> str:
    """The chain value before the first charge."""
    return hashlib.sha256(f"{FORMAT_NAME}\n{ledger_id}".encode()).hexdigest()


def chained(previous: str, charge: tuple[object, ...]) -> str:
    """The chain value after ``charge`` (a row of :data:`CHARGE_COLUMNS`): SHA-256 of the previous
    value and the fields, floats exactly (hex), texts with their length (so no two rows encode alike)."""
    fields = "|".join(_field_text(value) for value in charge)
    return hashlib.sha256(f"{previous}\n{fields}".encode()).hexdigest()


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


def create_exclusively(path: Path, initialize: Callable[[sqlite3.Connection], None]) -> bool:
    """Create the ledger file at ``path`` (mode 0600), initialized by ``initialize`` in a temporary
    file beside it and then hard-linked into place. False if ``path`` already existed (another process
    may have created it first): nothing is overwritten."""
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".creating", dir=path.parent)
    except OSError as error:
        raise OperationalError(f"cannot create the budget ledger {str(path)!r}: {error.strerror}") from error
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
        raise OperationalError(f"cannot create the budget ledger {str(path)!r}: {error}") from error
    except OSError as error:
        raise OperationalError(f"cannot create the budget ledger {str(path)!r}: {error.strerror}") from error
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


@dataclass(frozen=True)
class RegistryEntry:
    """A ledger once created (or opened) in a directory, by file name."""

    name: str
    ledger_id: str
    created_at: str


def registered(path: Path) -> RegistryEntry | None:
    """The registry's latest entry for ``path``'s file name, if any (unreadable lines are skipped)."""
    try:
        lines = (path.parent / REGISTRY_NAME).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise OperationalError(f"cannot read the ledger registry in {str(path.parent)!r}: {error.strerror}") from error
    found = None
    for line in lines:
        try:
            record = json.loads(line)
            entry = RegistryEntry(str(record["ledger"]), str(record["id"]), str(record["created_at"]))
        except (ValueError, KeyError, TypeError):
            continue
        if entry.name == path.name:
            found = entry
    return found


def register(path: Path, ledger_id: str, created_at: str) -> None:
    """Append ``path``'s ledger to its directory's registry (created 0600), unless it is the latest
    entry for that file name already."""
    known = registered(path)
    if known is not None and known.ledger_id == ledger_id:
        return
    line = json.dumps({"ledger": path.name, "id": ledger_id, "created_at": created_at}) + "\n"
    try:
        descriptor = os.open(path.parent / REGISTRY_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(descriptor, line.encode("utf-8"))
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    except OSError as error:
        raise OperationalError(f"cannot write the ledger registry in {str(path.parent)!r}: {error.strerror}") from error
