"""The small protocol a database backend implements.

A backend never sees privacy logic: dpsql hands it one SQL string (transpiled to ``dialect`` from
the sqlglot AST of :mod:`dpsql.sql.bounded`) and gets back columns as numpy arrays. ``describe``
reads only the table's metadata (column names and types), never its rows.
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
