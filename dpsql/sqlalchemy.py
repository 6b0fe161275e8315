"""A SQLAlchemy 2.x dialect over dpsql's DB-API module (``pip install 'dpsql[sqlalchemy]'``).

Registered as ``dpsql`` through the ``sqlalchemy.dialects`` entry point::

    engine = sqlalchemy.create_engine(
        "dpsql:///?ledger=adult.ledger&epsilon=2&delta=1e-6&default_epsilon=0.1"
        "&data=adult.csv&schema=adult.yaml"                  # registers the table 'adult'
    )
    engine = sqlalchemy.create_engine("dpsql://", creator=lambda: connection)   # a dpsql connection of yours
    with engine.connect() as c:
        c.execution_options(dpsql_epsilon=0.5).execute(sqlalchemy.text("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex"))
    pandas.read_sql("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", engine)   # at the default cost

The URL: the database part is an optional DuckDB file (``dpsql:///warehouse.duckdb``); the query
holds ``connect()``'s arguments — ``ledger``, ``epsilon`` and ``delta`` (the total budget),
``default_epsilon`` (the cost of a statement that names none), ``noise``, ``reuse``,
``non_negative``, ``excluded_cells``, ``stderr_columns`` (``true``: each released column is followed by
``<column>_stderr``, so jupysql and ``pandas.read_sql`` show the errors) — and optionally one table to register: ``data`` (a file), ``schema`` (its YAML or
JSON) and ``table`` (default: the data file's stem). More tables:
``connect_args={"tables": {"adult": ("adult.csv", "adult.yaml"), ...}}``.

Cost per statement: ``execution_options(dpsql_epsilon=…)`` (or ``dpsql_rho=…`` with Gaussian noise,
``dpsql_non_negative=True``) on a connection or a statement; without it the dpsql connection's
``default_epsilon`` applies, and without that the statement is refused before anything is read.

An engine holds ONE dpsql connection (a static pool): one budget, one store of released measurements
that later statements re-use. ``engine.dispose()`` closes it — also a connection given by ``creator``.
Reflection (``sqlalchemy.inspect(engine)``, ``MetaData.reflect``) lists the registered tables and their
columns with types from the privacy schema: public metadata only.
"""

from __future__ import annotations

import datetime

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import pool, types
from sqlalchemy.engine import default

import dpsql
from dpsql.errors import ProgrammingError
from dpsql.schema import ColumnDomain

COST_OPTIONS = {"dpsql_epsilon": "epsilon", "dpsql_rho": "rho", "dpsql_non_negative": "non_negative"}
_NUMBERS = ("epsilon", "delta", "default_epsilon")
_FLAGS = ("reuse", "non_negative", "stderr_columns")
_TEXT = ("ledger", "noise", "excluded_cells", "data", "schema", "table")
_ENGINE_TYPES = {
    "VARCHAR": types.String, "TEXT": types.String, "STRING": types.String, "BOOLEAN": types.Boolean,
    "TINYINT": types.Integer, "SMALLINT": types.Integer, "INTEGER": types.Integer, "BIGINT": types.BigInteger,
    "HUGEINT": types.BigInteger, "DOUBLE": types.Float, "FLOAT": types.Float, "REAL": types.Float,
    "DATE": types.Date, "TIMESTAMP": types.DateTime, "TIME": types.Time,
}


def _flag(name: str, text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false", "1", "0"):
        raise ProgrammingError(f"the URL's {name}= must be true or false, got {text!r}")
    return lowered in ("true", "1")


def _number(name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ProgrammingError(f"the URL's {name}= must be a number, got {text!r}") from None


def connect_arguments(database: str | None, query: Mapping[str, str | Sequence[str]]) -> dict[str, Any]:
    """``dpsql.connect`` keyword arguments (plus ``tables``) from a URL's database part and query."""
    unknown = sorted(set(query) - set(_NUMBERS) - set(_FLAGS) - set(_TEXT))
    if unknown:
        raise ProgrammingError(f"unknown dpsql URL parameter(s) {unknown}; known: {sorted((*_NUMBERS, *_FLAGS, *_TEXT))}")
    values: dict[str, str] = {}
    for key, value in query.items():
        if not isinstance(value, str):
            raise ProgrammingError(f"the URL gives {key}= more than once")
        values[key] = value
    arguments: dict[str, Any] = {"database": database or ":memory:"}
    if "epsilon" in values:
        arguments["budget"] = dpsql.Budget(_number("epsilon", values["epsilon"]), _number("delta", values.get("delta", "0")))
    elif "delta" in values:
        raise ProgrammingError("the URL gives delta= without epsilon=: give the whole budget, e.g. ?epsilon=1&delta=1e-6")
    if "default_epsilon" in values:
        arguments["default_epsilon"] = _number("default_epsilon", values["default_epsilon"])
    arguments.update({key: _flag(key, values[key]) for key in _FLAGS if key in values})
    arguments.update({key: values[key] for key in ("ledger", "noise", "excluded_cells") if key in values})
    if "data" in values or "schema" in values:
        if not ("data" in values and "schema" in values):
            raise ProgrammingError("the URL registers a table with both data= (a file) and schema= (its YAML or JSON)")
        name = values.get("table") or re.sub(r"\W", "_", Path(values["data"]).stem)
        arguments["tables"] = {name: (values["data"], values["schema"])}
    elif "table" in values:
        raise ProgrammingError("the URL gives table= without data= and schema=")
    return arguments


def column_type(domain: ColumnDomain, engine_type: str) -> types.TypeEngine:
    """The SQL type of a column: from its declared domain, else from the engine's column type."""
    if domain.kind == "range":
        if domain.is_timestamp_range:
            return types.DateTime()
        return types.Date() if domain.is_date_range else types.Integer()
    if domain.kind == "bins":
        return types.Float()
    if domain.kind == "categories":
        values = domain.values
        if all(isinstance(v, bool) for v in values):
            return types.Boolean()
        if all(isinstance(v, datetime.datetime) for v in values):
            return types.DateTime()
        if all(isinstance(v, datetime.date) for v in values):
            return types.Date()
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return types.Integer()
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return types.Float()
        return types.String()
    return _ENGINE_TYPES.get(engine_type.split("(")[0].upper(), types.NullType)()


class DpsqlDialect(default.DefaultDialect):
    """SQLAlchemy's view of dpsql: a read-only, qmark-parameter DB-API with a privacy cost per statement."""

    name = "dpsql"
    driver = "dpsql"
    supports_statement_cache = True
    supports_alter = False
    supports_sequences = False
    supports_native_boolean = True
    supports_sane_rowcount = False
    supports_sane_multi_rowcount = False
    default_paramstyle = "qmark"
    postfetch_lastrowid = False

    @classmethod
    def import_dbapi(cls) -> Any:
        return dpsql

    @classmethod
    def get_pool_class(cls, url: Any) -> type[pool.Pool]:
        return pool.StaticPool  # one dpsql connection per engine: one budget, one measurement store

    def create_connect_args(self, url: Any) -> tuple[list[Any], dict[str, Any]]:
        return [], connect_arguments(url.database, dict(url.query))

    def connect(self, *cargs: Any, **cparams: Any) -> dpsql.Connection:
        tables = cparams.pop("tables", {})
        connection = dpsql.connect(*cargs, **cparams)
        try:
            for name, (source, schema) in tables.items():
                connection.register(name, source, schema=schema)
        except BaseException:
            connection.close()
            raise
        return connection

    # -- execution: the statement's privacy cost from the execution options ---------------------------
    @staticmethod
    def _cost(context: Any) -> dict[str, Any]:
        options = {} if context is None else context.execution_options
        return {argument: options[option] for option, argument in COST_OPTIONS.items() if option in options}

    def do_execute(self, cursor: Any, statement: str, parameters: Any, context: Any = None) -> None:
        cursor.execute(statement, parameters, **self._cost(context))

    def do_execute_no_params(self, cursor: Any, statement: str, context: Any = None) -> None:
        cursor.execute(statement, **self._cost(context))

    def do_executemany(self, cursor: Any, statement: str, parameters: Any, context: Any = None) -> None:
        cost = self._cost(context)
        cost.pop("non_negative", None)  # executemany uses the connection's default
        cursor.executemany(statement, parameters, **cost)

    def get_isolation_level_values(self, dbapi_connection: Any) -> list[str]:
        return ["AUTOCOMMIT"]  # dpsql only reads, and every budget charge commits itself

    def get_isolation_level(self, dbapi_connection: Any) -> str:
        return "AUTOCOMMIT"

    def set_isolation_level(self, dbapi_connection: Any, level: str) -> None:
        """Nothing to set: AUTOCOMMIT is the only level (SQLAlchemy checks the name first)."""

    def do_ping(self, dbapi_connection: Any) -> bool:
        return not dbapi_connection.closed  # no statement: every statement has a privacy cost

    def _get_server_version_info(self, connection: Any) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", dpsql.__version__)[:3])

    def _get_default_schema_name(self, connection: Any) -> str:
        return "main"

    # -- reflection: registered tables and their schema, public metadata only -------------------------
    @staticmethod
    def _tables(connection: Any) -> dict[str, Any]:
        return connection.connection.dbapi_connection.tables()

    def get_schema_names(self, connection: Any, **kw: Any) -> list[str]:
        return ["main"]

    def get_table_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        return sorted(self._tables(connection))

    def get_view_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        return []

    def has_table(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> bool:
        return table_name.lower() in {name.lower() for name in self._tables(connection)}

    def get_columns(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> list[dict[str, Any]]:
        found = {name.lower(): table for name, table in self._tables(connection).items()}.get(table_name.lower())
        if found is None:
            from sqlalchemy.exc import NoSuchTableError

            raise NoSuchTableError(table_name)
        columns = []
        for name, engine_type in found.column_types.items():
            domain = found.schema.column(name)
            unit = name == found.schema.privacy_unit
            comment = "privacy unit" if unit else domain.describe()
            nullable = domain.nullable if domain.is_known else True
            columns.append({"name": name, "type": column_type(domain, engine_type.name), "nullable": nullable, "default": None, "comment": comment})
        return columns

    def get_pk_constraint(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> dict[str, Any]:
        return {"constrained_columns": [], "name": None}

    def get_foreign_keys(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> list[Any]:
        return []

    def get_indexes(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> list[Any]:
        return []


dialect = DpsqlDialect
