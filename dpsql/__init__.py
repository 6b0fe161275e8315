"""dpsql: a differentially private SQL engine with a PEP 249 (DB-API 2.0) interface.

>>> import dpsql
>>> conn = dpsql.connect(budget=dpsql.Budget(epsilon=1.0))
>>> dpsql.apilevel, dpsql.paramstyle
('2.0', 'qmark')
"""

from dpsql.accountant import Budget, Remaining, Spent
from dpsql.connection import Connection, Cursor, connect
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
from dpsql.schema import Schema
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

apilevel = "2.0"
threadsafety = 1  # threads may share the module, not connections
paramstyle = "qmark"



def __getattr__(name: str) -> object:
    """``dpsql.__version__``, read from the package metadata only when asked for."""
    if name == "__version__":
        from dpsql.version import package_version

        return package_version()
    raise AttributeError(f"module 'dpsql' has no attribute {name!r}")


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
