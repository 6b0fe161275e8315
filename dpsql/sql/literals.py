"""Declared domain values in the engine's own types: checked at the door, rendered in SQL, matched on return.

A schema is written in YAML or Python (``categories: [2024-01-01, …]``, ``[false, true]``, ``[0, 1]``),
the table's columns have engine types (DATE, BOOLEAN, VARCHAR, …). At ``register()`` every declared
category is cast to its column's type *in the engine* — a constant ``SELECT CAST(… AS <type>)`` that
reads no table — so that:

* a value that does not cast (``true`` for an INTEGER column, a non-date string for a DATE column) is
  refused then, naming the column, instead of failing later inside a statement's SQL — where whether it
  fails would depend on whether some row reaches the domain test, a free membership oracle;
* the domain keeps the engine's value (a ``date``, a ``bool``, the string ``'0'`` for a VARCHAR column
  declared ``[0, 1]``), which is exactly what the engine returns for the data: rows are matched to cells
  by equality with it, and released rows show it, like the engine's own ``GROUP BY``;
* a cast that changes a number (1.5 on an INTEGER column) is refused rather than silently rounded.

:func:`sql_literal` renders such a value as a literal the column compares with; :func:`python_value`
turns what a backend returns (numpy scalars, ``datetime64``) into the same Python values.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import math
from collections.abc import Callable, Mapping

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from dpsql.errors import DatabaseError, ProgrammingError
from dpsql.schema import ColumnDomain, Schema

Run = Callable[[str], Mapping[str, np.ndarray]]


@dataclasses.dataclass(frozen=True)
class ColumnType:
    """A column's engine type, parsed once: what kind of values it holds."""

    name: str  # as the engine reports it
    data_type: exp.DataType | None  # None when sqlglot cannot read the name

    @classmethod
    def of(cls, type_name: str, dialect: str) -> ColumnType:
        try:
            return cls(type_name, exp.DataType.build(type_name, dialect=dialect))
        except (SqlglotError, ValueError, TypeError):
            return cls(type_name, None)

    def _is(self, types: object) -> bool:
        return self.data_type is not None and self.data_type.is_type(*types)  # type: ignore[misc]

    @property
    def is_integer(self) -> bool:
        return self._is(exp.DataType.INTEGER_TYPES)

    @property
    def is_numeric(self) -> bool:
        return self._is(exp.DataType.NUMERIC_TYPES)

    @property
    def is_text(self) -> bool:
        return self._is(exp.DataType.TEXT_TYPES)

    @property
    def is_boolean(self) -> bool:
        return self._is((exp.DataType.Type.BOOLEAN,))

    @property
    def is_date(self) -> bool:
        return self._is((exp.DataType.Type.DATE, exp.DataType.Type.DATE32))

    @property
    def is_temporal(self) -> bool:
        return self._is(exp.DataType.TEMPORAL_TYPES)

    @property
    def can_hold_keys(self) -> bool:
        """Whether a column of this type can be grouped by without a declared domain (keys selected)."""
        return self.is_numeric or self.is_text or self.is_boolean or self.is_temporal


def python_value(value: object, column_type: ColumnType | None = None) -> object:
    """A value a backend returned, as the Python value the domain holds (NULL and NaN as None)."""
    if isinstance(value, np.datetime64):
        value = value.astype("datetime64[us]").item()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime.datetime) and column_type is not None and column_type.is_date:
        return value.date()
    return value


def sql_literal(value: object) -> exp.Expression:
    """A domain value (as :func:`canonical_schema` left it) as a SQL literal its column compares with."""
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float)):
        node = exp.Literal.number(repr(abs(value)) if isinstance(value, float) else abs(value))
        return exp.Neg(this=node) if value < 0 else node
    if isinstance(value, datetime.datetime):
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), exp.DataType.build("TIMESTAMP"))
    if isinstance(value, datetime.date):
        return exp.cast(exp.Literal.string(value.isoformat()), exp.DataType.build("DATE"))
    return exp.Literal.string(str(value))


def _declared_literal(value: object) -> exp.Expression:
    """A value as the schema declared it, before the cast (dates as ISO strings)."""
    if isinstance(value, datetime.date):
        return exp.Literal.string(value.isoformat(sep=" ") if isinstance(value, datetime.datetime) else value.isoformat())
    return sql_literal(value)


def _lossless(declared: object, cast: object) -> bool:
    """Whether casting kept a number a number of the same value (0/1 may become booleans)."""
    if isinstance(declared, (int, float)) and not isinstance(declared, str):
        if isinstance(cast, (int, float)):
            return float(declared) == float(cast)
    return cast is not None


def canonical_column(column: ColumnDomain, column_type: ColumnType, table: str, run: Run, dialect: str) -> ColumnDomain:
    """``column`` with its categories cast to ``column_type`` in the engine; its range and bins checked."""
    where = f"column {column.name!r} of {table!r} has type {column_type.name}"
    if column.kind == "bins":
        if not column_type.is_numeric:
            raise ProgrammingError(f"{where}, but its bins need numbers (a numeric column)")
        return column
    if column.kind == "range":
        if column.is_date_range and not column_type.is_date:
            raise ProgrammingError(f"{where}, but a range of dates needs a DATE column")
        if not column.is_date_range and not column_type.is_numeric:
            raise ProgrammingError(f"{where}, but its integer range needs numbers (a numeric column)")
        return column
    if column.kind != "categories":
        return column
    if column_type.data_type is None:
        raise ProgrammingError(f"{where}, which dpsql cannot read; declare no domain for it or cast it in a view")
    if _casts_to_itself(column.values, column_type.data_type):
        values: tuple[object, ...] = column.values
    else:
        values = _cast_in_engine(column, column_type.data_type, where, run, dialect)
    if len(set(values)) != len(values):
        raise ProgrammingError(f"{where}; its categories {list(column.values)} repeat a value in that type")
    return dataclasses.replace(column, values=values)


_IDENTITY_TEXT = (exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT)
_IDENTITY_INTEGERS = (exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.INT128)
INT32 = 1 << 31


def _casts_to_itself(values: tuple[object, ...], data_type: exp.DataType) -> bool:
    """Whether the engine's cast would return every value unchanged, so it need not be asked (10⁶
    categories register in a second): strings into a text type without a length (no truncation), and
    integers of 32 bits into a signed integer type of at least 32 bits."""
    if data_type.expressions:  # VARCHAR(n), DECIMAL(p, s), …: the cast may change a value
        return False
    if data_type.this in _IDENTITY_TEXT:
        return all(type(v) is str for v in values)
    if data_type.this in _IDENTITY_INTEGERS:
        return all(type(v) is int and -INT32 <= v < INT32 for v in values)
    return False


def _cast_in_engine(column: ColumnDomain, data_type: exp.DataType, where: str, run: Run, dialect: str) -> tuple[object, ...]:
    """The categories cast to the column's type by a constant ``SELECT`` (reads no table); refused when one
    does not cast, or changes a number."""
    casts = [
        exp.alias_(exp.cast(_declared_literal(v), data_type.copy()), f"v{i}")
        for i, v in enumerate(column.values)
    ]
    try:
        returned = run(exp.select(*casts).sql(dialect=dialect))
    except DatabaseError as error:  # the engine's message quotes the literals only: public
        reason = str(error.__cause__ or error).strip().splitlines()[0]
        raise ProgrammingError(
            f"{where}; its categories {list(column.values)} do not all cast to that type ({reason}); declare values "
            "of the column's type (ISO dates for DATE, true/false for BOOLEAN, numbers for numeric columns)"
        ) from None
    values = tuple(python_value(np.ravel(returned[f"v{i}"])[0], ColumnType("", data_type)) for i in range(len(column.values)))
    for declared, cast in zip(column.values, values):
        if not _lossless(declared, cast):
            raise ProgrammingError(f"{where}; its category {declared!r} becomes {cast!r} in that type: declare exact values")
    return values


def canonical_schema(schema: Schema, column_types: Mapping[str, ColumnType], table: str, run: Run, dialect: str) -> Schema:
    """The schema with every declared domain checked against, and cast to, its column's engine type."""
    for column in schema.columns:
        if column.bounds is not None and column.name in column_types and not column_types[column.name].is_numeric:
            raise ProgrammingError(
                f"column {column.name!r} of {table!r} has type {column_types[column.name].name}, but bounds need a numeric column"
            )
    columns = tuple(
        canonical_column(c, column_types[c.name], table, run, dialect) if c.is_known and c.name in column_types else c
        for c in schema.columns
    )
    return dataclasses.replace(schema, columns=columns)
