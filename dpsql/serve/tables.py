"""The served tables, opened and registered once per server, and the dpsql sessions a client connection gets.

Data files and in-memory frames are loaded into one DuckDB database of the server's; a DuckDB database
file is attached to it read-only (its table seen through a view of the served name); a PostgreSQL table
stays in PostgreSQL. The tables in the server's DuckDB database are registered once, at start-up, and
every session reads that one registration (:class:`dpsql.session.Registrations`, shared): the same salt,
and one kept relation of bounded rows per table, computed by the first charged read of any session
(:mod:`dpsql.bounded_tables`) — a session costs a cursor, not a copy of the table's bounded rows. A
PostgreSQL table is registered by each session on its own connection (PostgreSQL's temporary tables are
per connection; the kept rows live in PostgreSQL, not in the server). Every session of an analyst charges
the analyst's one ledger object (``Service.ledger``), so their charges commit in groups. Nothing here reads
a row: only table and column names and their SQL types, which is what the catalog answers are made of.

What a statement returns (the protocol's Describe) follows from the schema alone: the session asks
the pipeline (``pipeline.describe``), which prepares the statement without reading or charging.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

import dpsql
from dpsql.accountant import Ledger
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.factory import open_backend
from dpsql.errors import OperationalError, ProgrammingError
from dpsql.serve.catalog import CatalogColumn, CatalogTable, domain_comment, type_oid
from dpsql.session import PlanCache, Registrations, Session, Settings

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
    place: tuple[str, str]  # ("server", "") | ("postgresql", url): where it lives


SERVER = ("server", "")


class Tables:
    """Every served table, opened and (in the server's DuckDB database) registered once; ``open(analyst,
    ledger)`` gives a session its dpsql sessions."""

    def __init__(self, configs: tuple[TableConfig, ...]) -> None:
        self._server_db = duckdb.connect()
        self._attached: dict[str, str] = {}  # DuckDB file → its name in the server's database
        self._registrar: DuckDBBackend | None = None  # on a cursor of its own: registers, and keeps the bounded rows
        self.shared: Registrations | None = None
        try:
            self.tables = tuple(self._open(config) for config in configs)
            self.places = tuple(dict.fromkeys(t.place for t in self.tables))
            self._register_shared()
        except BaseException:
            self.close()
            raise

    def _open(self, config: TableConfig) -> ServedTable:
        schema = dpsql.Schema.load(config.schema)  # type: ignore[arg-type]
        if config.kind == "postgresql":
            place = ("postgresql", str(config.source))
            return ServedTable(config.name, config.relation, schema, _postgres_columns(str(config.source), config.relation), place)
        if config.kind == "duckdb":
            self._view(config)
        else:
            self._load(config)
        try:
            rows = self._server_db.execute(f"DESCRIBE {_quote(config.name)}").fetchall()
        except duckdb.Error as error:
            raise ProgrammingError(f"tables.{config.name}: no table {config.relation!r} in its database: {error}") from error
        return ServedTable(config.name, config.name, schema, {str(r[0]): str(r[1]) for r in rows}, SERVER)

    def _view(self, config: TableConfig) -> None:
        """A DuckDB file's table as a view of the served name, the file attached read-only (once)."""
        path = str(config.source)
        if path not in self._attached:
            alias = f"__dpsql_file_{len(self._attached)}"
            try:
                self._server_db.execute(f"ATTACH '{path.replace(chr(39), chr(39) * 2)}' AS {_quote(alias)} (READ_ONLY)")
            except duckdb.Error as error:
                raise ProgrammingError(f"tables.{config.name}: cannot open the DuckDB database {path!r}: {error}") from error
            self._attached[path] = alias
        source = f"{_quote(self._attached[path])}.main.{_quote(config.relation)}"
        try:
            self._server_db.execute(f"CREATE VIEW {_quote(config.name)} AS SELECT * FROM {source}")
        except duckdb.Error as error:
            raise ProgrammingError(f"tables.{config.name}: no table {config.relation!r} in its database: {error}") from error

    def _register_shared(self) -> None:
        """Register the tables of the server's DuckDB database once, for every session (module doc)."""
        served = [t for t in self.tables if t.place == SERVER]
        if not served:
            return
        self._registrar = DuckDBBackend(self._server_db.cursor())
        self.shared = Registrations(self._registrar, shared=True)
        for table in served:
            self.shared.register(table.name, None, table.schema)

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

    def open(self, analyst: Analyst, ledger: Ledger, plans: PlanCache | None = None) -> Engines:
        """A session's dpsql sessions: one per place the tables live, charging the analyst's ledger (shared
        with the analyst's other connections, never closed here), planning through ``plans`` (the analyst's
        cache, shared too); closed together by :meth:`Engines.close`."""
        engines = Engines(ledger)
        settings = Settings(analyst.noise, analyst.default_epsilon)
        try:
            for place in self.places:
                here = [t for t in self.tables if t.place == place]
                if place == SERVER:
                    session = Session(DuckDBBackend(engines.cursor(self._server_db)), ledger, settings, self.shared, owns_ledger=False)
                else:
                    session = Session(open_backend(place[1]), ledger, settings, owns_ledger=False)
                    for table in here:
                        session.register(table.name, None if table.relation == table.name else table.relation, table.schema)
                if plans is not None:
                    session.plans = plans
                engines.data.append((session, frozenset(t.name.lower() for t in here)))
        except BaseException:
            engines.close()
            raise
        return engines

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()  # drops the kept relations
        if self._registrar is not None:
            self._registrar.close()
            self._registrar.connection.close()
        self._server_db.close()


class Engines:
    """One client connection's dpsql sessions, each with the names of its tables, and the ledger they charge."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.data: list[tuple[Session, frozenset[str]]] = []
        self._cursors: list[duckdb.DuckDBPyConnection] = []  # dpsql does not close connections it was given

    def cursor(self, database: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        cursor = database.cursor()
        self._cursors.append(cursor)
        return cursor

    def close(self) -> None:
        for session, _ in self.data:
            session.close()
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
