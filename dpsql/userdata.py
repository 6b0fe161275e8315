"""Where the command line keeps a user's files: budget ledgers per data set and the shell's history.

The directory is ``$XDG_DATA_HOME/dpsql`` (default ``~/.local/share/dpsql``); on macOS
``~/Library/Application Support/dpsql`` and on Windows ``%LOCALAPPDATA%\\dpsql`` unless
``XDG_DATA_HOME`` is set. ``dpsql query`` and ``dpsql shell`` without ``--ledger`` spend from
``ledgers/<table>-<key>.ledger`` there, where the key is a hash of the data file's and the schema
file's absolute paths: the same data and schema share one budget across calls and sessions (editing
either file keeps it; ``--ledger`` names another).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path


def data_home() -> Path:
    """The per-user dpsql directory (not created here)."""
    configured = os.environ.get("XDG_DATA_HOME")
    if configured:
        return Path(configured) / "dpsql"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "dpsql"
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "dpsql"
    return Path.home() / ".local" / "share" / "dpsql"


def default_ledger(table: str, data: str | Path, schema: str | Path) -> Path:
    """The ledger of ``table`` read from ``data`` under ``schema`` (its directory is created)."""
    identity = f"{Path(data).resolve()}\n{Path(schema).resolve()}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    folder = data_home() / "ledgers"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{table}-{key}.ledger"


def history_file() -> Path:
    """The shell's readline history (its directory is created)."""
    home = data_home()
    home.mkdir(parents=True, exist_ok=True)
    return home / "shell_history"
