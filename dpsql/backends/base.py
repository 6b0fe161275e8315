"""The small protocol a database backend implements.

A backend never sees privacy logic: dpsql hands it one SQL string (transpiled to ``dialect`` from
the sqlglot AST of :mod:`dpsql.sql.bounded`) and gets back columns as numpy arrays. ``describe``
reads only the table's metadata (column names and types), never its rows.

A backend may also keep a query's result for the connection's lifetime (``create_temporary`` and
``drop_temporary``: a temporary table, or a cached view); dpsql keeps each table's bounded rows there
(:mod:`dpsql.bounded_tables`). A backend without them gets the bounding inlined in every statement. One
whose database has many connections may also keep a result every connection sees (``create_shared`` and
``drop_shared``: DuckDB), for sessions that share one registration of the tables (``dpsql serve``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Backend(Protocol):
    #: sqlglot dialect name the backend's SQL is written in ("duckdb", "postgres", "spark", ...)
    dialect: str

    def run(self, sql: str) -> dict[str, np.ndarray]:
        """Execute one statement; return its result columns by name (NULLs may come back masked)."""
        ...

    def describe(self, table: str) -> dict[str, str]:
        """Column name → type name of a table, in table order (metadata only)."""
        ...

    def close(self) -> None: ...


class TemporaryTables(Protocol):
    """What a backend that can keep query results offers (optional; see the module doc)."""

    def create_temporary(self, name: str, query: str) -> None:
        """Keep the result of ``query`` (a SELECT in the backend's dialect) as the relation ``name``,
        visible to this connection only, until ``drop_temporary`` or the end of the connection."""
        ...

    def drop_temporary(self, name: str) -> None:
        """Drop the relation ``name`` made by ``create_temporary`` (nothing when there is none)."""
        ...


class SharedTables(Protocol):
    """What a backend offers whose kept results every connection to its database sees (optional)."""

    def create_shared(self, name: str, query: str) -> None:
        """Keep the result of ``query`` as the relation ``name``, visible to every connection to the database,
        until ``drop_shared``."""
        ...

    def drop_shared(self, name: str) -> None:
        """Drop the relation ``name`` made by ``create_shared`` (nothing when there is none)."""
        ...
