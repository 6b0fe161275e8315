"""Public shells, run by DuckDB over released rows and public tables — never over private rows.

A statement's shell (:mod:`dpsql.sql.split`) reads its cores' released rows as relations and the public
tables registered with ``connection.register(name, source, public=True)``. :class:`PublicEngine` holds them
in a DuckDB database of its own, separate from the backend that holds the private tables: a shell cannot
name a private table (there is none in this database), and the database is locked down (no file, network or
extension access, configuration locked), so a shell reads nothing but what it is given.

Each run registers the cores' rows as temporary tables typed as prepare fixed them (:class:`CoreLayout`),
runs the shell's SQL, and splits the output into the visible columns and their standard errors (the hidden
``__dpsql_se_<name>`` columns). Prepare runs the shell once over empty cores: names, types and functions are
checked, and the output columns known, before anything is read.
"""

from __future__ import annotations

import datetime
import decimal
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

from dpsql.columns import clean_number
from dpsql.errors import DataError, ProgrammingError
from dpsql.result import OutputColumn, ResultSet
from dpsql.sql.literals import python_value
from dpsql.sql.split import ERROR, VALUE, Shell
from dpsql.types import DATETIME, NUMBER, STRING

_DUCKDB_TYPES = {"boolean": "BOOLEAN", "integer": "BIGINT", "numeric": "HUGEINT", "float": "DOUBLE", "date": "DATE", "timestamp": "TIMESTAMP", "text": "VARCHAR"}
_LOADERS = {".csv": "read_csv_auto", ".tsv": "read_csv_auto", ".json": "read_json_auto", ".parquet": "read_parquet"}


@dataclass(frozen=True)
class CoreLayout:
    """A core's relation: its name, column names and DuckDB types (released values, then their errors)."""

    relation: str
    columns: tuple[str, ...]
    types: tuple[str, ...]
    values: tuple[int, ...]  # positions (in the core's result) of the released values, whose errors are kept


@dataclass(frozen=True)
class ShellPlan:
    """A statement's shell as prepare checked it: its cores' relations and the columns it returns."""

    cores: tuple[CoreLayout, ...]
    columns: tuple[OutputColumn, ...]


def core_layout(relation: str, result: ResultSet) -> CoreLayout:
    """The relation of a core's result, typed from its values — the result of prepare's empty release, every
    declared group cell with zeros, so keys carry their domain's types — and its description. The released
    values (``__dpsql_a<i>``; keys and GROUPING() carry no error) keep their standard errors beside them."""
    names = [str(d[0]) for d in result.description]
    values = tuple(i for i, name in enumerate(names) if name.startswith(VALUE))
    types = [_duckdb_type([row[i] for row in result.rows], result.description[i][1]) for i in range(len(names))]
    columns = names + [ERROR + names[i] for i in values]
    return CoreLayout(relation, tuple(columns), tuple(types + ["DOUBLE"] * len(values)), values)


def _integer_type(values: Sequence[int]) -> str:
    """The narrowest of DuckDB's BIGINT, HUGEINT and UHUGEINT that holds every value (keys of any integer width)."""
    low, high = min(values), max(values)
    if -(1 << 63) <= low and high < 1 << 63:
        return "BIGINT"
    if -(1 << 127) <= low and high < 1 << 127:
        return "HUGEINT"
    return "UHUGEINT" if low >= 0 and high < 1 << 128 else "VARCHAR"


def _duckdb_type(values: Sequence[object], type_code: object) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "BOOLEAN"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return _integer_type(present)  # type: ignore[arg-type]
    if present and all(isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool) for v in present):
        return "DOUBLE"
    if present and all(isinstance(v, datetime.datetime) for v in present):
        return "TIMESTAMPTZ" if any(v.tzinfo is not None for v in present) else "TIMESTAMP"  # type: ignore[union-attr]
    if present and all(isinstance(v, datetime.date) for v in present):
        return "DATE"
    if present:
        return "VARCHAR"
    return {NUMBER: "DOUBLE", DATETIME: "TIMESTAMP"}.get(type_code, "VARCHAR")  # type: ignore[call-overload]


class PublicEngine:
    """The DuckDB database that runs shells: public tables and, during a run, released rows (module doc)."""

    def __init__(self) -> None:
        self._connection: duckdb.DuckDBPyConnection | None = None
        self.tables: dict[str, str] = {}  # lower-case name → the name as registered
        self.generation = 0  # counts registrations: what a shell was checked against

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        if self._connection is None:
            connection = duckdb.connect()
            connection.execute("SET enable_external_access = false")
            connection.execute("SET lock_configuration = true")
            self._connection = connection
        return self._connection

    def register(self, name: str, source: object) -> None:
        """Copy a public table into the engine: a file (.csv, .tsv, .json, .parquet), a pandas or polars frame or
        an Arrow table. Read through a DuckDB database of its own (the locked engine reads no files)."""
        loader = duckdb.connect()
        try:
            if isinstance(source, (str, Path)):
                reader = _LOADERS.get(Path(source).suffix.lower())
                if reader is None or not Path(source).is_file():
                    raise ProgrammingError(f"public table {name!r}: no .csv, .tsv, .json or .parquet file at {str(source)!r}")
                cursor = loader.execute(f"SELECT * FROM {reader}(?)", [str(source)])
            else:
                loader.register("source", source)
                cursor = loader.execute("SELECT * FROM source")
            columns = [str(d[0]) for d in cursor.description]
            types = [str(d[1]) for d in cursor.description]
            rows = cursor.fetchall()
        except duckdb.Error as error:
            raise ProgrammingError(f"public table {name!r}: cannot read it ({str(error).splitlines()[0]})") from None
        except (TypeError, ValueError) as error:
            raise ProgrammingError(f"public table {name!r}: pass a file path, a pandas or polars frame or an Arrow table ({error})") from None
        finally:
            loader.close()
        self._create(name, columns, types, rows, temporary=False)
        self.tables[name.lower()] = name
        self.generation += 1

    def register_rows(self, name: str, kinds: Mapping[str, str], columns: Mapping[str, np.ndarray]) -> None:
        """Copy a public table read from the backend (``columns``: its values by column, as ``Backend.run`` returns
        them; ``kinds``: each column's ``ColumnType.kind``) into the engine."""
        names = list(kinds)
        values = [[None if masked else python_value(v) for v, masked in zip(np.ma.getdata(columns[c]), np.ma.getmaskarray(columns[c]))] for c in names]
        rows = list(zip(*values)) if names else []
        self._create(name, names, [_DUCKDB_TYPES[kinds[c]] for c in names], rows, temporary=False)
        self.tables[name.lower()] = name
        self.generation += 1

    def _create(self, name: str, columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence[object]], temporary: bool) -> None:
        quoted = ".".join(_quote(part) for part in name.split("."))
        if "." in name:
            self.connection.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(name.split('.')[-2])}")
        lists = [[row[i] for row in rows] for i in range(len(columns))]
        if not columns:
            raise ProgrammingError(f"public table {name!r} has no columns")
        select = ", ".join(f"UNNEST(${i + 1}::{t}[]) AS {_quote(c)}" for i, (c, t) in enumerate(zip(columns, types)))
        kind = "TEMPORARY TABLE" if temporary else "TABLE"
        self.connection.execute(f"CREATE OR REPLACE {kind} {quoted} AS SELECT {select}", lists)

    def run(self, shell: Shell, layouts: Sequence[CoreLayout], results: Sequence[ResultSet]) -> tuple[ResultSet, tuple[OutputColumn, ...]]:
        """The shell's rows over its cores' released ``results`` (their standard errors beside them), and its columns."""
        for core, result in zip(layouts, results):
            rows = [tuple(row) + tuple(error[i] for i in core.values) for row, error in zip(result.rows, result.errors)]
            self._create(core.relation, core.columns, core.types, rows, temporary=True)
        try:
            cursor = self.connection.execute(shell.text)
            description, rows = cursor.description, cursor.fetchall()
        finally:
            for core in layouts:
                self.connection.execute(f"DROP TABLE IF EXISTS {_quote(core.relation)}")
        names = [str(d[0]) for d in description]
        visible = [i for i, name in enumerate(names) if not name.startswith(ERROR)]
        error_of = {name[len(ERROR):]: i for i, name in enumerate(names) if name.startswith(ERROR)}
        counts = {names[i]: sum(1 for j in visible if names[j] == names[i]) for i in visible}
        errors_at = [error_of.get(names[i]) if counts[names[i]] == 1 else None for i in visible]
        errors = [tuple(None if e is None or row[e] is None else float(row[e]) for e in errors_at) for row in rows]
        released = [tuple(clean_number(_python(row[i]), error) for i, error in zip(visible, row_errors)) for row, row_errors in zip(rows, errors)]
        columns = tuple(OutputColumn(names[i], _kind(str(description[i][1])), True, e is not None) for i, e in zip(visible, errors_at))
        return ResultSet(tuple((c.name, c.type_code, None, None, None, None, True) for c in columns), released, errors), columns


    def check(self, shell: Shell, layouts: Sequence[CoreLayout], results: Sequence[ResultSet]) -> tuple[OutputColumn, ...]:
        """Run the shell over prepare's empty releases: its columns; refuses (before anything is read) a shell that
        does not bind — unknown names or functions, mistyped expressions — with DuckDB's own reason."""
        try:
            return self.run(shell, layouts, results)[1]
        except duckdb.Error as error:
            raise ProgrammingError(f"the statement's SQL around its aggregates does not run: {_reason(error)}") from None

    def release(self, shell: Shell, layouts: Sequence[CoreLayout], results: Sequence[ResultSet]) -> ResultSet:
        """Run the shell over the released rows. It reads released values and public tables only, so its failure
        reveals nothing beyond them; the statement was charged, and its measurement is kept: run it again,
        corrected, to have it answered free."""
        try:
            return self.run(shell, layouts, results)[0]
        except duckdb.Error as error:
            raise DataError(
                f"the statement's SQL around its aggregates failed on the released values: {_reason(error)}; the statement "
                "was charged and its answers kept, so running it again, corrected, is free"
            ) from None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _reason(error: Exception) -> str:
    """DuckDB's message, its first sentence(s) only: not the rewritten SQL it quotes, nor dpsql's own names."""
    text = " ".join(str(error).split())
    for cut in (" LINE ", " Candidate bindings", " Did you mean", " Candidate functions"):
        text = text.split(cut)[0]
    return text[:240]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _kind(type_name: str) -> str:
    """An ``OutputColumn.kind`` from a DuckDB type name."""
    upper = type_name.upper()
    if upper == "BOOLEAN":
        return "boolean"
    if upper == "DATE":
        return "date"
    if upper.startswith("TIMESTAMP"):
        return "timestamp"
    if upper.startswith(("HUGEINT", "UHUGEINT", "UBIGINT")):
        return "numeric"
    if upper.startswith(("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER")):
        return "integer"
    if upper.startswith(("FLOAT", "DOUBLE", "DECIMAL", "REAL")):
        return "float"
    return "text"


def _python(value: object) -> object:
    """A value DuckDB returned, as dpsql releases values: DECIMAL as a float (or an int), NaN as NULL."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
