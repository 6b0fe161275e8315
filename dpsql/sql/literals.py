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
* a cast that changes a number (1.5 on an INTEGER column) is refused rather than silently rounded;
* a fractional category on a floating-point column (FLOAT, DOUBLE, REAL) is refused, with bins to
  declare instead: data computed in floating point rarely equals a decimal exactly (``0.1 + 0.2`` is not
  the double ``0.3``), so its rows would be dropped from every answer without a word.

A ``range`` of days takes a DATE column (its ends dates) or a TIMESTAMP column without time zone (its ends
midnights: each value counts in its day); on a TIMESTAMPTZ it is refused, since the day an instant falls on
depends on the session's time zone.

The other values a statement's SQL holds — a ``range``'s ends, ``bins`` edges, ``bounds`` — are
rendered as literals and run through the engine at ``register()`` too (:func:`check_literals`), each
compared with a NULL of its column's type, and refused if the engine rejects one or reads it as another
number. So no declared value can make a statement fail after its rows were read.

The schema's values are plain Python values by then (:mod:`dpsql.schema_values`); :func:`sql_literal`
renders one as a literal the column compares with; :func:`python_value` turns what a backend returns
(numpy scalars, ``datetime64``) into the same Python values.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from sqlglot import exp
from sqlglot.errors import SqlglotError

from dpsql.errors import DatabaseError, ProgrammingError
from dpsql.schema import ColumnDomain, Schema

Run = Callable[[str], Mapping[str, np.ndarray]]


_LOCAL_TIMESTAMPS = (
    exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ, exp.DataType.Type.TIMESTAMP_S, exp.DataType.Type.TIMESTAMP_MS,
    exp.DataType.Type.TIMESTAMP_NS, exp.DataType.Type.DATETIME, exp.DataType.Type.DATETIME2, exp.DataType.Type.DATETIME64,
    exp.DataType.Type.SMALLDATETIME,
)  # fmt: skip
WIDER_THAN_BIGINT = (exp.DataType.Type.UBIGINT, exp.DataType.Type.INT128, exp.DataType.Type.UINT128, exp.DataType.Type.INT256, exp.DataType.Type.UINT256)
"""Integer types whose values may lie beyond a 64-bit signed integer: shown as ``numeric`` (PostgreSQL's NUMERIC)."""


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
    def resolution(self) -> float | None:
        """The spacing of the values the type holds: 1 for integers, ``10^-s`` for ``DECIMAL(p, s)``; None
        for floating point (any real value) and for a DECIMAL whose scale the engine does not state."""
        if self.is_integer:
            return 1
        if self._is((exp.DataType.Type.DECIMAL,)) and self.data_type is not None and len(self.data_type.expressions) == 2:
            scale = self.data_type.expressions[1].this
            text = scale.this if isinstance(scale, exp.Literal) else getattr(scale, "name", "")
            if str(text).isdigit():
                return 10.0 ** -int(text)
        return None

    @property
    def is_numeric(self) -> bool:
        return self._is(exp.DataType.NUMERIC_TYPES)

    @property
    def is_floating(self) -> bool:
        """An approximate numeric type (FLOAT, DOUBLE, REAL): equality with a decimal is not dependable."""
        return self._is((exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE))

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
    def is_timestamp(self) -> bool:
        """A timestamp without time zone (a wall-clock date and time): its day is the date it shows."""
        return self._is(_LOCAL_TIMESTAMPS)

    @property
    def is_zoned_timestamp(self) -> bool:
        """An instant (TIMESTAMPTZ, Spark's TIMESTAMP): the day it falls on depends on a session's time zone."""
        return self._is((exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPLTZ))

    @property
    def kind(self) -> str:
        """What its values are, as a result column or a parameter shows them: ``boolean``, ``integer`` (64
        bits), ``numeric`` (integers beyond: HUGEINT, UBIGINT), ``float``, ``date``, ``timestamp`` or ``text``."""
        if self.is_boolean:
            return "boolean"
        if self.is_integer:
            return "numeric" if self._is(WIDER_THAN_BIGINT) else "integer"
        if self.is_numeric:
            return "float"
        if self.is_date:
            return "date"
        return "timestamp" if self.is_temporal else "text"

    @property
    def can_hold_keys(self) -> bool:
        """Whether a column of this type can be grouped by without a declared domain (keys selected)."""
        return self.is_numeric or self.is_text or self.is_boolean or self.is_temporal


_DOUBLE = ColumnType.of("DOUBLE", "duckdb")
_DATE = ColumnType.of("DATE", "duckdb")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


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
    if isinstance(value, (bool, np.bool_)):
        return exp.Boolean(this=bool(value))
    if isinstance(value, (int, float, np.number)):  # rendered from the plain value, never a subclass's repr
        node = exp.Literal.number(float.__repr__(abs(float(value))) if isinstance(value, (float, np.floating)) else int(abs(value)))
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
    """Whether casting kept a number a number of the same value (0/1 may become booleans); integers are
    compared exactly (through a double, 2^127 - 1 and 2^127 would look alike)."""
    if isinstance(declared, int) and isinstance(cast, int) and not isinstance(declared, bool):
        return declared == cast
    if isinstance(declared, (int, float)) and not isinstance(declared, str):
        if isinstance(cast, (int, float)):
            return float(declared) == float(cast)
    return cast is not None


def _as_text(expression: exp.Expression) -> exp.Expression:
    return exp.cast(expression, exp.DataType.build("TEXT"))


def _integer(text: object) -> int | None:
    """An integer the engine returned as text (None for NULL)."""
    return None if text is None or (isinstance(text, float) and math.isnan(text)) else int(str(text))


def canonical_column(column: ColumnDomain, column_type: ColumnType, table: str, run: Run, dialect: str) -> ColumnDomain:
    """``column`` with its categories cast to ``column_type`` in the engine; its range and bins checked."""
    where = _where(column, column_type, table)
    if column.kind == "bins":
        if not column_type.is_numeric:
            raise ProgrammingError(f"{where}, but its bins need numbers (a numeric column)")
        return column
    if column.kind == "range":
        if column.is_date_range:
            return _range_of_days(column, column_type, where)
        if not column_type.is_numeric:
            raise ProgrammingError(f"{where}, but its integer range needs numbers (a numeric column)")
        return column
    if column.kind != "categories":
        return column
    _refuse_fractional_categories(column, column_type, where)
    if column_type.data_type is None:
        raise ProgrammingError(f"{where}, which dpsql cannot read; declare no domain for it or cast it in a view")
    if _casts_to_itself(column.values, column_type.data_type):
        values: tuple[object, ...] = column.values
    else:
        values = _cast_in_engine(column, column_type.data_type, where, run, dialect)
    if len(set(values)) != len(values):
        raise ProgrammingError(f"{where}; its categories {list(column.values)} repeat a value in that type")
    return dataclasses.replace(column, values=values)


def _range_of_days(column: ColumnDomain, column_type: ColumnType, where: str) -> ColumnDomain:
    """A range of days on a DATE column (its ends dates) or on a TIMESTAMP column (its ends midnights: a value
    counts in its day's cell, ``ColumnDomain.is_timestamp_range``); refused on any other column, and on a
    timestamp with a time zone, whose day depends on the session's zone (neither public nor fixed)."""
    days = tuple(v.date() if isinstance(v, datetime.datetime) else v for v in column.values)
    if column_type.is_date:
        return dataclasses.replace(column, values=days)
    if column_type.is_timestamp:
        return dataclasses.replace(column, values=tuple(datetime.datetime(d.year, d.month, d.day) for d in days))  # type: ignore[attr-defined]
    if column_type.is_zoned_timestamp:
        raise ProgrammingError(
            f"{where}, whose values are instants: the day one falls on depends on the session's time zone, so a range of days "
            f"cannot count them; register a view of their local time in a fixed zone as a TIMESTAMP without time zone ({column.name} "
            "AT TIME ZONE 'UTC' in DuckDB and PostgreSQL) and declare the range on it"
        )
    raise ProgrammingError(f"{where}, but a range of dates needs a DATE or TIMESTAMP column")


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


def _compares_as_itself(value: object, column_type: ColumnType) -> bool:
    """Whether a range end or bin edge needs no check by the engine: a 32-bit integer compared with a signed
    integer column of at least 32 bits is read as itself and compares without failing (as in
    :func:`_casts_to_itself`; 1,025 bin edges took a constant query of 2,050 columns, 0.13 s)."""
    return type(value) is int and column_type.data_type is not None and _casts_to_itself((value,), column_type.data_type)


def _cast_in_engine(column: ColumnDomain, data_type: exp.DataType, where: str, run: Run, dialect: str) -> tuple[object, ...]:
    """The categories cast to the column's type by a constant ``SELECT`` (reads no table); refused when one
    does not cast, or changes a number."""
    integers = ColumnType("", data_type).is_integer  # read back as text: exact at any width (HUGEINT, UBIGINT)
    casts = [
        exp.alias_(_as_text(exp.cast(_declared_literal(v), data_type.copy())) if integers else exp.cast(_declared_literal(v), data_type.copy()), f"v{i}")
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
    values = tuple(
        _integer(np.ravel(returned[f"v{i}"])[0]) if integers else python_value(np.ravel(returned[f"v{i}"])[0], ColumnType("", data_type))
        for i in range(len(column.values))
    )
    for declared, cast in zip(column.values, values):
        if not _lossless(declared, cast):
            raise ProgrammingError(f"{where}; its category {declared!r} becomes {cast!r} in that type: declare exact values")
    return values


def _refuse_fractional_categories(column: ColumnDomain, column_type: ColumnType, where: str) -> None:
    """Fractional categories on a floating-point column are refused (module doc), with bins around them."""
    fractional = [v for v in column.values if isinstance(v, float) and not v.is_integer()]
    if not column_type.is_floating or not fractional:
        return
    values = sorted(decimal.Decimal(repr(float(v))) for v in column.values)  # type: ignore[arg-type]  # decimal: no float residue
    gaps = [b - a for a, b in zip(values, values[1:])] or [decimal.Decimal(1)]
    edges = [values[0] - gaps[0] / 2, *((a + b) / 2 for a, b in zip(values, values[1:])), values[-1] + gaps[-1] / 2]
    raise ProgrammingError(
        f"{where}; its category {fractional[0]!r} is not a whole number, and floating-point data rarely equals a fraction "
        f"exactly (0.1 + 0.2 is not 0.3), so its rows would be dropped without a word: declare bins around the values instead "
        f"(bins: [{', '.join(format(edge.normalize(), 'f') for edge in edges)}]), or categories on a DECIMAL or text column"
    )


def _compared(column: ColumnDomain, column_type: ColumnType) -> list[tuple[object, ColumnType]]:
    """The values a statement's SQL renders as literals for ``column``'s range ends, bin edges and bounds
    (and their width), each with the type it is compared with (bounds: DOUBLE, as the clamp compares them),
    but for those that compare as themselves (:func:`_compares_as_itself`)."""
    if column.is_timestamp_range:  # its SQL compares the value's day with the ends' days (``bounded_rows.in_range``)
        compared = [(v.date(), _DATE) for v in column.values]  # type: ignore[attr-defined]
    elif column.kind in ("range", "bins"):
        compared = [(v, column_type) for v in column.values if not _compares_as_itself(v, column_type)]
    else:
        compared = []
    if column.bounds is not None:
        low, high = (float(bound) for bound in column.bounds)
        compared += [(low, _DOUBLE), (high, _DOUBLE), (high - low, _DOUBLE)]  # the clamp's ends and the grid's width
    return [] if column_type.data_type is None else compared


def check_literals(columns: Sequence[ColumnDomain], column_types: Mapping[str, ColumnType], table: str, run: Run, dialect: str) -> None:
    """Run every literal of :func:`_compared` through the engine in one constant query, compared with a
    NULL of its type; refuse the column whose value the engine rejects or reads as another number."""
    for column in columns:
        if column.bounds is not None and not math.isfinite(float(column.bounds[1]) - float(column.bounds[0])):
            raise ProgrammingError(
                f"column {column.name!r} of {table!r}: bounds {list(column.bounds)} are too far apart for a double "
                "(hi - lo overflows); declare narrower bounds"
            )
    checked = [(c, _compared(c, column_types[c.name])) for c in columns if c.name in column_types]
    checked = [(column, compared) for column, compared in checked if compared]
    if not checked:
        return
    selected = []
    for number, (_, compared) in enumerate(checked):
        for index, (value, kind) in enumerate(compared):
            literal = sql_literal(value)
            null = exp.cast(exp.null(), kind.data_type.copy())  # type: ignore[union-attr]
            selected += [exp.alias_(literal.copy(), f"v{number}_{index}"), exp.alias_(exp.LT(this=null, expression=literal), f"c{number}_{index}")]
    try:
        returned = run(exp.select(*selected).sql(dialect=dialect))
    except DatabaseError as error:  # the engine's message quotes the literals only: public
        if len(checked) > 1:  # which column: each on its own
            for column, _ in checked:
                check_literals([column], column_types, table, run, dialect)
        reason = str(error.__cause__ or error).strip().splitlines()[0]
        column, compared = checked[0]
        shown = [value for value, _ in compared]
        raise ProgrammingError(
            f"{_where(column, column_types[column.name], table)}; the engine cannot compare it with its declared values "
            f"{shown if len(shown) <= 8 else [*shown[:8], '...']} ({reason})"
        ) from None
    for number, (column, compared) in enumerate(checked):
        for index, (value, kind) in enumerate(compared):
            read = python_value(np.ravel(returned[f"v{number}_{index}"])[0], kind)
            if not _lossless(value, read) or (isinstance(value, (int, float)) and not isinstance(read, (int, float))):
                raise ProgrammingError(
                    f"{_where(column, column_types[column.name], table)}; the engine reads its declared value {value!r} as "
                    f"{read!r}: declare values it reads exactly"
                )


def _where(column: ColumnDomain, column_type: ColumnType, table: str) -> str:
    return f"column {column.name!r} of {table!r} has type {column_type.name}"


def canonical_schema(schema: Schema, column_types: Mapping[str, ColumnType], table: str, run: Run, dialect: str) -> Schema:
    """The schema with every declared domain checked against, and cast to, its column's engine type, and
    every literal its SQL renders checked by the engine."""
    for column in schema.columns:
        if column.bounds is not None and column.name in column_types and not column_types[column.name].is_numeric:
            raise ProgrammingError(
                f"column {column.name!r} of {table!r} has type {column_types[column.name].name}, but bounds need a numeric column"
            )
    columns = tuple(
        canonical_column(c, column_types[c.name], table, run, dialect) if c.is_known and c.name in column_types else c
        for c in schema.columns
    )
    check_literals(columns, column_types, table, run, dialect)
    columns = tuple(
        dataclasses.replace(c, resolution=column_types[c.name].resolution) if c.value_bounds is not None and c.name in column_types else c
        for c in columns
    )
    return dataclasses.replace(schema, columns=columns)
