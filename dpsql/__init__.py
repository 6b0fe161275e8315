"""dpsql: a differentially private SQL engine with a PEP 249 (DB-API 2.0) interface.

>>> import dpsql
>>> conn = dpsql.connect(budget=dpsql.Budget(epsilon=1.0))
>>> dpsql.apilevel, dpsql.paramstyle
('2.0', 'qmark')
"""

from __future__ import annotations

import importlib

from dpsql.accountant import Budget, Remaining, Spent
from dpsql.errors import (
    BudgetExceededError,
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,
)
from dpsql.types import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Date,
    DateFromTicks,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
)

_LAZY = {"connect": "dpsql.connection", "Connection": "dpsql.connection", "Cursor": "dpsql.connection", "Schema": "dpsql.schema"}
"""Names whose modules load the SQL engine (sqlglot, DuckDB, the planner, numpy): imported on first use,
so that ``import dpsql`` (and ``dpsql --help``) stay fast."""


def __getattr__(name: str) -> object:
    """The lazy names of :data:`_LAZY`, and ``__version__`` (read from the package metadata when asked)."""
    if name == "__version__":
        from dpsql.version import package_version

        return package_version()
    if name not in _LAZY:
        raise AttributeError(f"module 'dpsql' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups are ordinary attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


apilevel = "2.0"
threadsafety = 1  # threads may share the module, not connections
paramstyle = "qmark"


__all__ = [
    "BINARY",
    "DATETIME",
    "NUMBER",
    "ROWID",
    "STRING",
    "Binary",
    "Budget",
    "BudgetExceededError",
    "Connection",
    "Cursor",
    "DataError",
    "DatabaseError",
    "Date",
    "DateFromTicks",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "Remaining",
    "Schema",
    "Spent",
    "Time",
    "TimeFromTicks",
    "Timestamp",
    "TimestampFromTicks",
    "Warning",
    "apilevel",
    "connect",
    "paramstyle",
    "threadsafety",
]
