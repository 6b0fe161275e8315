"""The default backend: embedded DuckDB.

Sources a user registers become DuckDB relations under an internal name: CSV and JSON files are
loaded into a table once, Parquet files are read in place through a view, pandas DataFrames and
Arrow tables are registered zero-copy, and an existing table or view of the DuckDB database is used
as it is.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from pathlib import Path

import duckdb
import numpy as np

from dpsql.errors import OperationalError, ProgrammingError

PREPARED_KEPT = 64  # prepared aggregations kept per connection, least recently used deallocated
_LOADERS = {".csv": "read_csv_auto", ".tsv": "read_csv_auto", ".json": "read_json_auto", ".parquet": "read_parquet"}


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class DuckDBBackend:
    """Runs statements on a DuckDB connection (an in-memory database unless a path is given).

    Each aggregation is prepared once (``PREPARE``) and executed by name after that: on a small table,
    parsing, binding and planning the aggregation cost about as much as running it. DuckDB binds a
    prepared statement again when the tables it reads have changed since, so ``EXECUTE`` answers what
    the SQL text would (and fails where it would fail). Names carry a random prefix so they cannot meet
    a caller's own prepared statements on a shared connection.
    """

    dialect = "duckdb"

    def __init__(self, database: str | Path | duckdb.DuckDBPyConnection = ":memory:") -> None:
        if isinstance(database, duckdb.DuckDBPyConnection):
            self.connection, self._owned = database, False
        else:
            try:
                self.connection, self._owned = duckdb.connect(str(database)), True
            except duckdb.Error as error:
                raise OperationalError(f"cannot open DuckDB database {str(database)!r}: {error}") from error
        self._prefix = f"__dpsql_{secrets.token_hex(6)}_"
        self._prepared: OrderedDict[str, str] = OrderedDict()  # SQL text → its prepared statement's name
        self._count = 0

    def run(self, sql: str) -> dict[str, np.ndarray]:
        try:
            return self.connection.execute(f"EXECUTE {self._prepared_name(sql)}").fetchnumpy()
        except duckdb.Error as error:
            raise OperationalError(f"the backend failed to run the bounded aggregation: {error}") from error

    def _prepared_name(self, sql: str) -> str:
        """The name of ``sql``'s prepared statement, prepared now if it is not kept."""
        name = self._prepared.pop(sql, None)
        if name is None:
            self._count += 1
            name = f"{self._prefix}{self._count}"
            self.connection.execute(f"PREPARE {name} AS {sql}")
        self._prepared[sql] = name
        while len(self._prepared) > PREPARED_KEPT:
            _, oldest = self._prepared.popitem(last=False)
            self.connection.execute(f"DEALLOCATE {oldest}")
        return name

    def create_temporary(self, name: str, query: str) -> None:
        self._keep(f"CREATE TEMPORARY TABLE {_quote(name)} AS {query}", "keep a temporary table")

    def drop_temporary(self, name: str) -> None:
        self._keep(f"DROP TABLE IF EXISTS temp.{_quote(name)}", "drop a temporary table")

    def create_shared(self, name: str, query: str) -> None:
        """Keep the result of ``query`` as the table ``name`` of the database, seen by every connection to
        it (the cursors of one DuckDB database; ``dpsql serve``'s sessions), until :meth:`drop_shared`."""
        self._keep(f"CREATE TABLE {_quote(name)} AS {query}", "keep a shared table")

    def drop_shared(self, name: str) -> None:
        self._keep(f"DROP TABLE IF EXISTS main.{_quote(name)}", "drop a shared table")

    def _keep(self, statement: str, action: str) -> None:
        try:
            self.connection.execute(statement)
        except duckdb.Error as error:
            raise OperationalError(f"the backend failed to {action}: {error}") from error

    def progress(self) -> float | None:
        """How far the running statement is (0..1), or None when DuckDB cannot tell; for a progress bar."""
        done = self.connection.query_progress()
        return None if done < 0 else float(done) / 100.0

    def describe(self, table: str) -> dict[str, str]:
        try:
            rows = self.connection.execute(f"DESCRIBE {_quote(table)}").fetchall()
        except duckdb.Error as error:
            raise ProgrammingError(f"no table or view {table!r} in the DuckDB database: {error}") from error
        return {str(row[0]): str(row[1]) for row in rows}

    def has_relation(self, name: str) -> bool:
        found = self.connection.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? UNION ALL "
            "SELECT count(*) FROM duckdb_views() WHERE view_name = ?",
            [name, name],
        ).fetchall()
        return sum(r[0] for r in found) > 0

    def register(self, internal_name: str, source: object) -> None:
        """Make ``source`` (a file path, a DataFrame or Arrow table) queryable as ``internal_name``."""
        if isinstance(source, (str, Path)):
            self._register_file(internal_name, Path(source))
            return
        try:
            self.connection.register(internal_name, source)
        except (duckdb.Error, TypeError, ValueError) as error:
            raise ProgrammingError(
                f"cannot register a {type(source).__name__}: pass a file path (.csv, .parquet, .json), "
                f"a pandas DataFrame, an Arrow table, or the name of an existing DuckDB table ({error})"
            ) from error

    def _register_file(self, internal_name: str, path: Path) -> None:
        loader = _LOADERS.get(path.suffix.lower())
        if loader is None:
            raise ProgrammingError(f"cannot tell the format of {str(path)!r}: use a .csv, .tsv, .json or .parquet file")
        if not path.is_file():
            raise ProgrammingError(f"no such data file: {str(path)!r}")
        kind = "VIEW" if loader == "read_parquet" else "TABLE"
        # a CSV's first line is its header, even when every name in it is a number (0,1,…,15): the
        # schema names the columns, and DuckDB's detection would otherwise read that line as data
        options = ", header = true" if loader == "read_csv_auto" else ""
        try:
            self.connection.execute(
                f"CREATE OR REPLACE {kind} {_quote(internal_name)} AS SELECT * FROM {loader}({_string(str(path))}{options})"
            )
        except duckdb.Error as error:
            raise ProgrammingError(f"cannot load {str(path)!r}: {error}") from error

    def close(self) -> None:
        if self._owned:
            self.connection.close()
            return
        for name in self._prepared.values():  # a caller's connection: leave it without our statements
            try:
                self.connection.execute(f"DEALLOCATE {name}")
            except duckdb.Error:
                pass
        self._prepared.clear()
