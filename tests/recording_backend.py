"""A DuckDB backend that keeps every statement it is sent (tests read salts and SQL back from it)."""

from __future__ import annotations

import duckdb
import numpy as np

from dpsql.backends.duckdb import DuckDBBackend


class RecordingBackend(DuckDBBackend):
    """DuckDB that keeps every statement it is sent that reads a table (the bounded reads; the constant
    casts ``register()`` sends to check declared values are not kept)."""

    def __init__(self, database: duckdb.DuckDBPyConnection) -> None:
        super().__init__(database)
        self.statements: list[str] = []

    def run(self, sql: str) -> dict[str, np.ndarray]:
        if " FROM " in sql.upper():
            self.statements.append(sql)
        return super().run(sql)
