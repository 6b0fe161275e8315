"""A backend over any PEP 249 (DB-API 2.0) connection; used for PostgreSQL through psycopg 3.

The data stays in the database: dpsql sends one aggregation statement (in the connection's
dialect) and fetches the marginal counts. Tables are found in the database's catalog
(``information_schema.columns`` of the current schema), which reads metadata only. Files and data
frames cannot be registered here: load them into the database (e.g. with ``COPY``) and register
the table by name.

>>> import psycopg                                                       # doctest: +SKIP
>>> backend = DBAPIBackend(psycopg.connect("postgresql://u:p@127.0.0.1/db", autocommit=True))  # doctest: +SKIP
"""

from __future__ import annotations

import sys

import numpy as np
from sqlglot import exp

from dpsql.backends.dialects import POSTGRES, engine_name
from dpsql.backends.rows import columns_from_rows
from dpsql.errors import OperationalError, ProgrammingError

#: DB-API driver modules whose SQL dialect is known
DRIVER_DIALECTS = {"psycopg": POSTGRES}


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def driver_module(connection: object) -> str:
    """The top-level module of a DB-API connection's driver (``"psycopg"`` for a psycopg connection)."""
    return type(connection).__module__.split(".")[0]


def is_dbapi_connection(candidate: object) -> bool:
    return all(callable(getattr(candidate, method, None)) for method in ("cursor", "commit", "rollback", "close"))


class DBAPIBackend:
    """Runs statements on a DB-API connection whose driver is listed in :data:`DRIVER_DIALECTS`.

    ``owned``: close the connection with the backend (True when dpsql opened it from a DSN).
    """

    def __init__(self, connection: object, *, owned: bool = False) -> None:
        driver = driver_module(connection)
        if driver not in DRIVER_DIALECTS:
            raise ProgrammingError(
                f"no SQL dialect known for DB-API driver {driver!r}: dpsql's DB-API backend supports "
                f"{sorted(DRIVER_DIALECTS)} (PostgreSQL); pass a DSN 'postgresql://...' or a psycopg connection"
            )
        self.connection = connection
        self.dialect = DRIVER_DIALECTS[driver]
        self.engine = engine_name(self.dialect)
        self._driver_error: type[BaseException] = getattr(sys.modules[driver], "Error")
        self._owned = owned

    def _fetch(self, sql: str) -> tuple[list[str], list[tuple[object, ...]]]:
        cursor = self.connection.cursor()  # type: ignore[attr-defined]
        try:
            cursor.execute(sql)
            names = [str(column[0]) for column in cursor.description]
            return names, list(cursor.fetchall())
        except self._driver_error:
            self._end_failed_transaction()
            raise
        finally:
            cursor.close()

    def _execute(self, sql: str) -> None:
        cursor = self.connection.cursor()  # type: ignore[attr-defined]
        try:
            cursor.execute(sql)
        except self._driver_error:
            self._end_failed_transaction()
            raise
        finally:
            cursor.close()

    def _end_failed_transaction(self) -> None:
        """Roll back after an error so the connection can run the next statement (a lost connection
        cannot: its own error is the one reported)."""
        try:
            self.connection.rollback()  # type: ignore[attr-defined]
        except self._driver_error:
            pass

    def run(self, sql: str) -> dict[str, np.ndarray]:
        try:
            names, rows = self._fetch(sql)
        except self._driver_error as error:
            raise OperationalError(f"{self.engine} failed to run the bounded aggregation: {error}") from error
        return columns_from_rows(names, rows)

    def create_temporary(self, name: str, query: str) -> None:
        """A temporary table; committed at once when the connection is not in autocommit mode, so
        that rolling back a later failed statement cannot drop it."""
        try:
            self._execute(f"CREATE TEMPORARY TABLE {_quote(name)} AS {query}")
            if not getattr(self.connection, "autocommit", True):
                self.connection.commit()  # type: ignore[attr-defined]
        except self._driver_error as error:
            raise OperationalError(f"{self.engine} failed to keep a temporary table: {error}") from error

    def drop_temporary(self, name: str) -> None:
        try:
            self._execute(f"DROP TABLE IF EXISTS pg_temp.{_quote(name)}")
        except self._driver_error as error:
            raise OperationalError(f"{self.engine} failed to drop a temporary table: {error}") from error

    def describe(self, table: str) -> dict[str, str]:
        query = (
            exp.select("column_name", "data_type")
            .from_(exp.Table(this=exp.to_identifier("columns"), db=exp.to_identifier("information_schema")))
            .where(exp.column("table_name").eq(exp.Literal.string(table)))
            .where(exp.column("table_schema").eq(exp.CurrentSchema()))
            .order_by("ordinal_position")
        )
        try:
            _, rows = self._fetch(query.sql(dialect=self.dialect))
        except self._driver_error as error:
            raise OperationalError(f"cannot read the columns of {table!r} from {self.engine}: {error}") from error
        if not rows:
            raise ProgrammingError(
                f"no table or view {table!r} in the current schema of the {self.engine} database; "
                "create it there (e.g. with COPY) or check the name and the search_path"
            )
        return {str(name): str(type_name) for name, type_name in rows}

    def has_relation(self, name: str) -> bool:
        try:
            self.describe(name)
        except ProgrammingError:
            return False
        return True

    def register(self, internal_name: str, source: object) -> None:
        """Refuse: the DB-API backend reads tables already in the database, it never uploads data."""
        raise ProgrammingError(
            f"{self.engine} backend: cannot register a {type(source).__name__} "
            f"({source!r:.60}); load the data into the database (e.g. with COPY) and register the table by name: "
            "conn.register('name', schema=...)"
        )

    def close(self) -> None:
        if self._owned:
            self.connection.close()  # type: ignore[attr-defined]
