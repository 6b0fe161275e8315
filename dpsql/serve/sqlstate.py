"""dpsql's exceptions as PostgreSQL errors: a SQLSTATE per PEP 249 class, and a message that is
dpsql's own where it can only speak of the statement, the schema and the budget.

=========================  ========  ==========================================================
dpsql exception            SQLSTATE  meaning for a client
=========================  ========  ==========================================================
BudgetExceededError        53Z01     dpsql's code (class 53, insufficient resources): no budget left
NotSupportedError          0A000     feature_not_supported: valid SQL outside dpsql's grammar
ProgrammingError           42601     syntax_error: bad SQL, unknown table/column, bad ε/ρ
DataError                  22000     data_exception: a value outside a column's declared domain
IntegrityError             55000     the ledger's stored budget differs from the configuration
OperationalError           58000     system_error: the backend or the ledger failed
InternalError, any other   XX000     internal_error
=========================  ========  ==========================================================

Backend and ledger failures may carry the backend's own text, which can quote row values: the client
gets a fixed message and an incident number, the server's log gets the full error.
"""

from __future__ import annotations

import logging
import secrets

from pg_mimic import PgError

import dpsql

log = logging.getLogger("dpsql.serve")

BUDGET_EXCEEDED = "53Z01"
INVALID_PARAMETER_VALUE = "22023"
PROTOCOL_VIOLATION = "08P01"
INTERNAL_ERROR = "XX000"

_CODES: tuple[tuple[type[BaseException], str], ...] = (
    (dpsql.BudgetExceededError, BUDGET_EXCEEDED),
    (dpsql.NotSupportedError, "0A000"),
    (dpsql.ProgrammingError, "42601"),
    (dpsql.DataError, "22000"),
    (dpsql.IntegrityError, "55000"),
)
_WITHHELD = {
    dpsql.OperationalError: ("58000", "the data backend or the budget ledger failed"),
}


def as_pg_error(error: BaseException) -> PgError:
    """The PostgreSQL error a client sees for ``error`` (logged server-side when its text is withheld)."""
    if isinstance(error, PgError):  # already what the client sees
        return error
    for kind, code in _CODES:
        if isinstance(error, kind):
            return PgError(code, str(error))
    code, summary = next(
        ((code, summary) for kind, (code, summary) in _WITHHELD.items() if isinstance(error, kind)),
        (INTERNAL_ERROR, "the server failed to answer the statement"),
    )
    incident = secrets.token_hex(4)
    log.error("incident %s: %s: %s", incident, type(error).__name__, error, exc_info=error)
    return PgError(
        code,
        f"{summary} (incident {incident}; the server log has the details). If the statement had read data it "
        "was charged; SHOW dpsql.budget tells what is left",
    )
