"""The PEP 249 exception hierarchy, plus :class:`BudgetExceededError`.

::

    Warning
    Error
     ├── InterfaceError           misuse of the interface itself (closed cursor, fetch before execute)
     └── DatabaseError
          ├── DataError           a value is bad: a literal outside a column's declared domain
          ├── OperationalError    the backend or the ledger failed (I/O, locks, a missing file)
          ├── IntegrityError      the ledger's stored budget disagrees with the one given
          ├── InternalError       an engine defect; please report it
          ├── ProgrammingError    bad SQL, unknown table or column, bad schema, bad ε/δ or parameters
          ├── NotSupportedError   valid SQL outside dpsql's grammar (see grammar/dpsql.ebnf)
          └── BudgetExceededError the statement would spend more than the budget has left
"""

from __future__ import annotations


class Warning(Exception):  # noqa: A001 - the name is mandated by PEP 249
    """Important warnings (PEP 249)."""


class Error(Exception):
    """Base class of every dpsql error (PEP 249)."""


class InterfaceError(Error):
    """The database interface was misused (closed cursor or connection, fetch with no result set)."""


class DatabaseError(Error):
    """Errors related to the database or the privacy engine."""


class DataError(DatabaseError):
    """A value is invalid, e.g. a literal outside the declared domain of its column."""


class OperationalError(DatabaseError):
    """The backend or the budget ledger failed for reasons outside the programmer's control."""


class IntegrityError(DatabaseError):
    """Stored state is inconsistent with the request (a ledger created with a different budget)."""


class InternalError(DatabaseError):
    """The engine reached a state it should not; this is a dpsql defect."""


class ProgrammingError(DatabaseError):
    """Bad SQL, an unknown table or column, an invalid schema, bad privacy parameters."""


class NotSupportedError(DatabaseError):
    """Valid SQL that dpsql's grammar does not accept (the message says what is supported)."""


class BudgetExceededError(DatabaseError):
    """The statement would exceed the privacy budget; it was refused before any data was read."""


class ExceptionsOnConnection:
    """PEP 249's optional extension: the module's exception classes as connection attributes, so code
    holding only a connection can write ``except connection.ProgrammingError``."""

    Warning = Warning
    Error = Error
    InterfaceError = InterfaceError
    DatabaseError = DatabaseError
    DataError = DataError
    OperationalError = OperationalError
    IntegrityError = IntegrityError
    InternalError = InternalError
    ProgrammingError = ProgrammingError
    NotSupportedError = NotSupportedError
    BudgetExceededError = BudgetExceededError


__all__ = [
    "BudgetExceededError",
    "DataError",
    "DatabaseError",
    "Error",
    "ExceptionsOnConnection",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "Warning",
]
