"""``open_backend(spec)``: the backend for whatever a user passes to ``dpsql.connect(backend=...)``.

==========================================  ===============================================
spec                                        backend
==========================================  ===============================================
None, ``":memory:"``, a path                DuckDB (in memory, or that database file)
a ``duckdb`` connection                     DuckDB on that connection (not closed by dpsql)
``"postgresql://..."`` / ``"postgres://"``  PostgreSQL through psycopg 3 (opened, owned)
a DB-API connection (psycopg 3)             the generic DB-API backend (not closed by dpsql)
a ``pyspark.sql.SparkSession``              Spark (``spark.sql``; the session is not stopped)
an object with ``dialect``/``run``/...      used as it is (any :class:`Backend`)
==========================================  ===============================================

The optional drivers (psycopg, pyspark) are imported only when such a spec is given; install them
with ``pip install 'dpsql[backends]'``.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from dpsql.backends.base import Backend
from dpsql.backends.dbapi import DBAPIBackend, is_dbapi_connection
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import InterfaceError, OperationalError, ProgrammingError

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_BACKEND_METHODS = ("run", "describe", "has_relation", "register", "close")


def open_backend(spec: object = None) -> Backend:
    """The backend for ``spec`` (see the module's table)."""
    if spec is None:
        return DuckDBBackend()
    if isinstance(spec, str) and spec.startswith(POSTGRES_SCHEMES):
        return _open_postgres(spec)
    if isinstance(spec, (str, Path, duckdb.DuckDBPyConnection)):
        return DuckDBBackend(spec)  # type: ignore[arg-type]
    if _is_spark_session(spec):
        from dpsql.backends.spark import SparkBackend

        return SparkBackend(spec)  # type: ignore[arg-type]
    if isinstance(getattr(spec, "dialect", None), str) and all(callable(getattr(spec, m, None)) for m in _BACKEND_METHODS):
        return spec  # type: ignore[return-value]
    if is_dbapi_connection(spec):
        return DBAPIBackend(spec)
    raise ProgrammingError(
        f"cannot use a {type(spec).__name__} as a backend: pass None (in-memory DuckDB), a DuckDB path or "
        "connection, a 'postgresql://user:password@host:port/database' DSN, a DB-API connection "
        "(psycopg), or a pyspark SparkSession"
    )


def _is_spark_session(spec: object) -> bool:
    kind = type(spec)
    return kind.__module__.startswith("pyspark.sql") and kind.__name__ == "SparkSession"


def _open_postgres(dsn: str) -> Backend:
    try:
        import psycopg
    except ImportError as error:
        raise InterfaceError(
            "a PostgreSQL DSN needs the psycopg driver: pip install 'dpsql[backends]' (or 'psycopg[binary]')"
        ) from error
    try:
        connection = psycopg.connect(dsn, autocommit=True)
    except psycopg.Error as error:
        raise OperationalError(f"cannot connect to PostgreSQL at {_without_password(dsn)}: {error}") from error
    return DBAPIBackend(connection, owned=True)


def _without_password(dsn: str) -> str:
    """The DSN with its password (if any) replaced by ``***``, for error messages."""
    scheme, _, rest = dsn.partition("://")
    credentials, at, location = rest.rpartition("@")
    if not at or ":" not in credentials:
        return dsn
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{location}"
