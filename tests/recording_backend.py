"""A DuckDB backend that keeps every statement it is sent (tests read salts and SQL back from it)."""

from __future__ import annotations

import duckdb
import numpy as np

from dpsql.backends.duckdb import DuckDBBackend


class RecordingBackend(DuckDBBackend):
    """DuckDB that keeps every statement it is sent that reads a table: the queries of the bounded rows it
    is asked to keep (``create_temporary``) and the aggregations (the constant casts ``register()`` sends
    to check declared values, and its probe for temporary tables, are not kept)."""

    def __init__(self, database: duckdb.DuckDBPyConnection) -> None:
        super().__init__(database)
        self.statements: list[str] = []

    def run(self, sql: str) -> dict[str, np.ndarray]:
        if " FROM " in sql.upper():
            self.statements.append(sql)
        return super().run(sql)

    def create_temporary(self, name: str, query: str) -> None:
        if " FROM " in query.upper():
            self.statements.append(query)
        super().create_temporary(name, query)
