"""The served tables, opened once per server, and the dpsql connections a session gets on them.

Data files and in-memory frames are loaded into one DuckDB database of the server's; a DuckDB
database file is opened read-only; a PostgreSQL table stays in PostgreSQL. Each session opens, per
such place, a dpsql connection on the analyst's ledger (DuckDB sessions share the loaded tables
through cursors of one database). Nothing here reads a row: only table and column names and their
SQL types, which is what the catalog answers are made of.

What a statement returns (the protocol's Describe) follows from the schema alone: the session asks
the pipeline (``pipeline.describe``), which prepares the statement without reading or charging.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

import dpsql
from dpsql.errors import OperationalError, ProgrammingError
from dpsql.serve.catalog import CatalogColumn, CatalogTable, domain_comment, type_oid
from dpsql.session import PlanCache

if TYPE_CHECKING:
    from dpsql.serve.config import Analyst, TableConfig

_LOADERS = {".csv": "read_csv_auto", ".tsv": "read_csv_auto", ".json": "read_json_auto", ".parquet": "read_parquet"}

# PostgreSQL type names for DuckDB's, as the catalog shows them.
_PG_TYPES = {
    "VARCHAR": "text", "BIGINT": "bigint", "INTEGER": "integer", "SMALLINT": "smallint", "TINYINT": "smallint",
    "UBIGINT": "numeric", "UINTEGER": "bigint", "USMALLINT": "integer", "UTINYINT": "smallint", "HUGEINT": "numeric",
    "DOUBLE": "double precision", "FLOAT": "real", "BOOLEAN": "boolean", "DATE": "date",
    "TIMESTAMP": "timestamp without time zone", "TIMESTAMP WITH TIME ZONE": "timestamp with time zone",
}


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def postgres_type(engine_type: str) -> str:
    """The PostgreSQL name of a column type (DuckDB's or PostgreSQL's own)."""
    upper = engine_type.upper()
    if upper.startswith("DECIMAL") or upper.startswith("NUMERIC"):
        return "numeric"
    return _PG_TYPES.get(upper, engine_type.lower() if engine_type.islower() else "text")


@dataclass(frozen=True)
class ServedTable:
    name: str
    relation: str  # its name in the database that holds it
    schema: dpsql.Schema
    column_types: dict[str, str]  # engine types, in column order
    place: tuple[str, str]  # ("server", "") | ("duckdb", path) | ("postgresql", url): where it lives


class Tables:
    """Every served table, opened once; ``connect(analyst, ledger)`` gives a session its connections."""

    def __init__(self, configs: tuple[TableConfig, ...]) -> None:
        self._server_db = duckdb.connect()
        self._duckdb_files: dict[str, duckdb.DuckDBPyConnection] = {}
        try:
            self.tables = tuple(self._open(config) for config in configs)
        except BaseException:
            self.close()
            raise
        self.places = tuple(dict.fromkeys(t.place for t in self.tables))

    def _open(self, config: TableConfig) -> ServedTable:
        schema = dpsql.Schema.load(config.schema)  # type: ignore[arg-type]
        kind = config.kind
        if kind == "postgresql":
            place = ("postgresql", str(config.source))
            return ServedTable(config.name, config.relation, schema, _postgres_columns(str(config.source), config.relation), place)
        if kind == "duckdb":
            path = str(config.source)
            if path not in self._duckdb_files:
                try:
                    self._duckdb_files[path] = duckdb.connect(path, read_only=True)
                except duckdb.Error as error:
                    raise ProgrammingError(f"tables.{config.name}: cannot open the DuckDB database {path!r}: {error}") from error
            database, place, relation = self._duckdb_files[path], ("duckdb", path), config.relation
        else:
            database, place, relation = self._server_db, ("server", ""), config.name
            self._load(config)
        try:
            rows = database.execute(f"DESCRIBE {_quote(relation)}").fetchall()
        except duckdb.Error as error:
            raise ProgrammingError(f"tables.{config.name}: no table {relation!r} in its database: {error}") from error
        return ServedTable(config.name, relation, schema, {str(r[0]): str(r[1]) for r in rows}, place)

    def _load(self, config: TableConfig) -> None:
        target = _quote(config.name)
        if config.kind == "frame":
            self._server_db.register("__dpsql_serve_frame", config.source)
            self._server_db.execute(f"CREATE TABLE {target} AS SELECT * FROM __dpsql_serve_frame")
            self._server_db.unregister("__dpsql_serve_frame")
            return
        path = Path(config.source)  # type: ignore[arg-type]
        loader = _LOADERS.get(path.suffix.lower())
        if loader is None or not path.is_file():
            raise ProgrammingError(
                f"tables.{config.name}.source: {str(path)!r} is not a .csv, .tsv, .json, .parquet, .duckdb or .db file"
            )
        try:
            self._server_db.execute(f"CREATE TABLE {target} AS SELECT * FROM {loader}(?)", [str(path)])
        except duckdb.Error as error:
            raise ProgrammingError(f"tables.{config.name}: cannot load {str(path)!r}: {error}") from error

    def catalog_tables(self) -> tuple[CatalogTable, ...]:
        """Every table's columns as the catalog shows them: names, PostgreSQL types, nullable (a declared
        domain says which values are counted, not which the data holds), the declared domain as comment."""
        return tuple(
            CatalogTable(
                t.name,
                tuple(CatalogColumn(c, type_oid(postgres_type(kind)), False, domain_comment(t.schema, c)) for c, kind in t.column_types.items()),
                "public table: its rows are not protected; statements join it with private tables" if t.schema.public else
                f"dpsql table: {'one privacy unit per ' + repr(t.schema.privacy_unit) if t.schema.privacy_unit else 'one row per privacy unit'}; "
                "statements release differentially private aggregates, never rows",
            )
            for t in self.tables
        )

    def open(self, analyst: Analyst, ledger: str | None, plans: PlanCache | None = None) -> Engines:
        """A session's connections: one per place the tables live, on the analyst's ledger, planning
        through ``plans`` (the analyst's cache, shared by all their connections); closed together by
        :meth:`Engines.close`."""
        engines = Engines()
        try:
            for place in self.places:
                here = [t for t in self.tables if t.place == place]
                connection = self._connection(place, analyst, ledger, engines)
                if plans is not None:
                    connection._session.plans = plans
                engines.data.append((connection, frozenset(t.name.lower() for t in here)))
                for table in here:
                    connection.register(table.name, None if table.relation == table.name else table.relation, schema=table.schema)
        except BaseException:
            engines.close()
            raise
        return engines

    def _connection(self, place: tuple[str, str], analyst: Analyst, ledger: str | None, engines: Engines) -> dpsql.Connection:
        kind, where = place
        options = {"budget": analyst.budget, "ledger": ledger, "noise": analyst.noise, "default_epsilon": analyst.default_epsilon}
        if kind == "postgresql":
            return dpsql.connect(backend=where, **options)  # type: ignore[arg-type]
        database = self._server_db if kind == "server" else self._duckdb_files[where]
        return dpsql.connect(database=engines.cursor(database), **options)  # type: ignore[arg-type]

    def close(self) -> None:
        for database in (self._server_db, *self._duckdb_files.values()):
            database.close()


class Engines:
    """One session's dpsql connections, each with the names of its tables."""

    def __init__(self) -> None:
        self.data: list[tuple[dpsql.Connection, frozenset[str]]] = []
        self._cursors: list[duckdb.DuckDBPyConnection] = []  # dpsql does not close connections it was given

    def cursor(self, database: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        cursor = database.cursor()
        self._cursors.append(cursor)
        return cursor

    def close(self) -> None:
        for connection, _ in self.data:
            connection.close()
        for cursor in self._cursors:
            cursor.close()


def _postgres_columns(url: str, relation: str) -> dict[str, str]:
    """Column names and types of a PostgreSQL table (the catalog, never its rows)."""
    try:
        import psycopg
    except ImportError as error:
        raise ProgrammingError("a postgresql:// table source needs psycopg: pip install 'dpsql[backends]'") from error
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            rows = connection.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
                (relation,),
            ).fetchall()
    except psycopg.Error as error:
        raise OperationalError(f"cannot read the columns of {relation!r} from PostgreSQL: {type(error).__name__}") from error
    if not rows:
        raise ProgrammingError(f"no table {relation!r} in the PostgreSQL database's current schema")
    return {str(name): str(kind) for name, kind in rows}
