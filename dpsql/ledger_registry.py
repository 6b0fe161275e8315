"""A directory's registry of its budget ledgers: the second durable record that a ledger is checked against.

Each directory that holds ledger files keeps one SQLite file, :data:`REGISTRY_NAME` (mode ``0600``),
with one row per ledger file name: the ledger's random id, when it was created, its format version,
and its *checkpoint* — the sequence number of its last charge (the charge id), the chain value of that
charge and the digest of the running totals after it (:func:`dpsql.ledger_format.state_digest`).
:class:`dpsql.accountant.Ledger` records a checkpoint after every charge it commits and when it opens a
ledger, and refuses a ledger that does not continue the registered one (:func:`compare`):

* a registered name whose file is gone (it is never re-created with a fresh budget);
* a file whose id differs from the registered one (replaced by a ledger made elsewhere);
* a file of an older format than registered (downgraded, e.g. with the ``sqlite3`` shell);
* a file whose last charge is older than the checkpoint (an older copy restored: its spent budget
  would be spent again), or whose history at the checkpoint differs from it.

A checkpoint only moves forward, so processes sharing a ledger never move it back, and it is written
after the charge is committed, so the registry is never ahead of the file: a crash between the two
leaves it one charge behind — which the next open accepts (the file continues it) and catches up. The
registry is a write-ahead-log database written without an fsync per checkpoint (the charge itself is
fsynced): a power cut may lose its last few checkpoints, never corrupt it, and it costs a charge a
fraction of a millisecond.

This detects an older copy restored *over one file*. Restoring the whole directory, registry included,
rolls both back together and cannot be told from the real past: back up and restore ledgers knowingly
(``README.md``, "What in-process use protects"). Registries written by dpsql before this format were
text (:data:`LEGACY_NAME`, one JSON object per line with the name, id and creation time); when a
directory's registry is first created, the names in that file are carried over, so a ledger created
then is still known.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from dpsql import ledger_format
from dpsql.errors import IntegrityError, OperationalError

REGISTRY_NAME = ".dpsql-ledgers.sqlite"
LEGACY_NAME = ".dpsql-ledgers"
APPLICATION_ID = 0x64707372  # "dpsr"
LOCK_TIMEOUT_SECONDS = 60.0
UNKNOWN = -1  # the last charge of a ledger carried over from a legacy registry (only its id is known)
_TABLE = (
    "CREATE TABLE ledgers (name TEXT PRIMARY KEY, ledger_id TEXT NOT NULL, created_at TEXT NOT NULL, "
    "format INTEGER NOT NULL, last_charge INTEGER NOT NULL, head TEXT NOT NULL, digest TEXT NOT NULL)"
)


@dataclass(frozen=True)
class Checkpoint:
    """What is known of one ledger: its identity, and the state after its charge number ``last_charge``."""

    ledger_id: str
    created_at: str
    format: int
    last_charge: int  # the sequence number (charge id) of its last charge; 0 before any, UNKNOWN if not recorded
    head: str  # the chain value of that charge (the genesis value before any)
    digest: str  # the digest of the running totals after it


class Registry:
    """The registry of one directory, opened (and created, with the legacy names carried over) on demand."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / REGISTRY_NAME
        if not self.path.exists():
            ledger_format.create_exclusively(self.path, lambda database: _initialize(database, directory / LEGACY_NAME), "ledger registry")
        try:
            self._db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as error:
            raise OperationalError(f"cannot open the ledger registry {str(self.path)!r}: {error}") from error
        try:
            self._db.execute("PRAGMA busy_timeout=%d" % int(LOCK_TIMEOUT_SECONDS * 1000))
            self._db.execute("PRAGMA journal_mode=WAL")  # never torn by a crash; NORMAL: no fsync per checkpoint
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._check()
        except BaseException as error:
            self._db.close()
            if isinstance(error, sqlite3.Error):
                raise self._damaged(error) from error
            raise

    def _damaged(self, error: object) -> IntegrityError:
        return IntegrityError(
            f"the ledger registry {str(self.path)!r} is damaged ({error}): restore it from a backup, or delete it to "
            "start a new one (the ledgers in its directory are then no longer checked against their last charges)"
        )

    def _check(self) -> None:
        application_id = self._db.execute("PRAGMA application_id").fetchone()[0]
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(ledgers)")]
        if application_id != APPLICATION_ID or columns != ["name", "ledger_id", "created_at", "format", "last_charge", "head", "digest"]:
            raise self._damaged("it is not a dpsql ledger registry")

    def checkpoint(self, name: str) -> Checkpoint | None:
        """The registered checkpoint of ledger file ``name``, if any."""
        try:
            row = self._db.execute(
                "SELECT ledger_id, created_at, format, last_charge, head, digest FROM ledgers WHERE name = ?", (name,)
            ).fetchone()
        except sqlite3.OperationalError as error:
            raise OperationalError(f"cannot read the ledger registry {str(self.path)!r}: {error}") from error
        except sqlite3.Error as error:
            raise self._damaged(error) from error
        if row is None:
            return None
        ledger_id, created_at, version, last_charge, head, digest = row
        if not (isinstance(ledger_id, str) and isinstance(version, int) and isinstance(last_charge, int) and isinstance(head, str)):
            raise self._damaged(f"its row for {name!r} is corrupt")
        return Checkpoint(ledger_id, str(created_at), version, last_charge, head, str(digest))

    def record(self, name: str, checkpoint: Checkpoint) -> None:
        """Register ``checkpoint`` for ``name``, or move its registered checkpoint forward to it (never back,
        never over another ledger's row)."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO ledgers VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET format = excluded.format, "
                    "last_charge = excluded.last_charge, head = excluded.head, digest = excluded.digest "
                    "WHERE ledger_id = excluded.ledger_id AND (last_charge < excluded.last_charge OR format < excluded.format)",
                    (name, checkpoint.ledger_id, checkpoint.created_at, checkpoint.format, checkpoint.last_charge, checkpoint.head, checkpoint.digest),
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as error:
            raise OperationalError(f"cannot write the ledger registry {str(self.path)!r}: {error}") from error

    def close(self) -> None:
        self._db.close()


def _initialize(database: sqlite3.Connection, legacy: Path) -> None:
    database.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    database.execute(_TABLE)
    for name, ledger_id, created_at in _legacy_entries(legacy):
        database.execute(
            "INSERT OR REPLACE INTO ledgers VALUES (?, ?, ?, 2, ?, '', '')", (name, ledger_id, created_at, UNKNOWN)
        )  # the legacy registry came with format 2; the latest line for a name wins


def _legacy_entries(path: Path) -> list[tuple[str, str, str]]:
    """The (name, id, creation time) lines of a legacy text registry; unreadable lines are skipped."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as error:
        raise OperationalError(f"cannot read the ledger registry {str(path)!r}: {error.strerror}") from error
    entries = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError, RecursionError):
            record = json.loads(line)
            entries.append((str(record["ledger"]), str(record["id"]), str(record["created_at"])))
    return entries


def _undo(path: str, registry: Path) -> str:
    forget = f"sqlite3 {str(registry)!r} \"DELETE FROM ledgers WHERE name = '{Path(path).name}'\""
    return f"restore the ledger's latest copy; to accept this file on purpose (its lost charges are spent again), run {forget}"


def downgraded(path: str, registry: Path, registered: Checkpoint, version: int) -> IntegrityError:
    """The refusal of a file of an older format than ``registered`` (never upgraded again in its place)."""
    return IntegrityError(
        f"the budget ledger {path!r} has format {version}, but it was registered with format {registered.format}: "
        f"the file was downgraded outside dpsql; {_undo(path, registry)}"
    )


def compare(path: str, registry: Path, registered: Checkpoint, found: Checkpoint, chain_at: str | None) -> None:
    """Refuse the ledger file ``path`` (its state ``found``) unless it continues ``registered``.
    ``chain_at`` is the file's chain value at the registered last charge ('' if it has no such charge;
    None: not looked up, which only a caller that knows the file is ahead may pass)."""
    if found.ledger_id != registered.ledger_id:
        raise IntegrityError(
            f"the budget ledger {path!r} is ledger {found.ledger_id}, but ledger {registered.ledger_id} (created "
            f"{registered.created_at}) is registered at this path: the file was replaced by another ledger; {_undo(path, registry)}"
        )
    if found.format < registered.format:
        raise downgraded(path, registry, registered, found.format)
    if registered.last_charge == UNKNOWN:
        return
    if found.last_charge < registered.last_charge:
        raise IntegrityError(
            f"the budget ledger {path!r} ends at charge #{found.last_charge}, but charge #{registered.last_charge} was "
            f"recorded: the file is an older copy (its spent budget would be spent again); {_undo(path, registry)}"
        )
    if found.last_charge == registered.last_charge:
        continued = found.head == registered.head and found.digest == registered.digest
    else:
        continued = chain_at is None or chain_at == registered.head
    if not continued:
        raise IntegrityError(
            f"the budget ledger {path!r} does not continue the history registered for it (charge "
            f"#{registered.last_charge} differs): the file was replaced or altered outside dpsql; {_undo(path, registry)}"
        )
