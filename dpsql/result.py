"""Released answers → a statement's result set: every group cell, the grouping-set layout, ORDER BY / LIMIT.

Counts are released as floats: the consistent (least-squares) estimates are not integers, and rounding
them would break consistency across cells and subtotals; every released number is snapped to the
shortest decimal within a relative 10⁻⁹ (:func:`clean_number`: no float residue). Each count carries its
standard error; group-key columns carry None in the errors. Every cell of a grouping set's GROUP BY domain
is a row (noisy zeros included), except the hidden remainder cell of a released key set and the cells the
WHERE clause excludes: those are known to be empty from the statement and the schema alone (public), so
they are not presented as measurements — unless the connection keeps them (``excluded_cells="zeros"``),
as exact zeros. Branches (grouping sets) fill the statement's columns by their layout
(a rolled-up column is NULL, ``GROUPING()`` a constant). HAVING, ORDER BY, OFFSET and LIMIT apply to the
released rows (post-processing, free of privacy cost; hidden aggregates they use are dropped last); the
order is total over values of any types, NULLs last in both directions, so ordering can never fail. Without ORDER BY, rows come branch by branch, each in domain
order of its GROUP BY columns (the first varies slowest).
"""

from __future__ import annotations

import datetime
import decimal
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from statistics import NormalDist

import numpy as np

from dpsql.columns import Column, ColumnRows, Labels, Repeated, Row, clean_number
from dpsql.errors import ProgrammingError
from dpsql.frame_source import ERROR_SUFFIX, error_layout
from dpsql.frames import FrameSource, ResultFrames
from dpsql.schema import BinLabel, ColumnDomain
from dpsql.sql.compile import CompiledQuery
from dpsql.sql.grouping import Constant
from dpsql.sql.literals import INT64_MAX, INT64_MIN, ColumnType
from dpsql.sql.having import holds
from dpsql.sql import kinds
from dpsql.sql.kinds.protocol import Cells, ChosenCells, RankVariances
from dpsql.sql.statement import Statement
from dpsql.types import DATETIME, NUMBER, STRING

Interval = tuple[float, float] | tuple[datetime.date, datetime.date]  # a date quantile's interval is in dates


def confidence_intervals(rows: Sequence[Row], errors: Sequence[Row], level: float) -> list[tuple[Interval | None, ...]]:
    """Per row and column, ``(low, high)`` = value ± z·stderr at two-sided ``level`` (normal
    approximation of the released noise), or None where a column carries no error (group keys,
    GROUPING(), NULL). Post-processing: free of privacy cost."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ProgrammingError(f"the confidence level must lie strictly between 0 and 1, got {level!r}")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    return [tuple(None if e is None or v is None else _interval(v, z * float(e)) for v, e in zip(row, err)) for row, err in zip(rows, errors)]  # type: ignore[arg-type]


def _interval(value: object, half_width: float) -> Interval:
    """``value ± half_width``; a bin (a quantile answered with a bin's label) is its midpoint; a date
    quantile's error is in days: whole days, rounded outwards, and the interval ends at the calendar's ends."""
    if isinstance(value, BinLabel):
        value = (value.low + value.high) / 2
    if isinstance(value, datetime.date):
        step = datetime.timedelta(days=half_width if isinstance(value, datetime.datetime) else math.ceil(half_width))
        return (_shifted(value, -step), _shifted(value, step))
    return (clean_number(float(value) - half_width), clean_number(float(value) + half_width))  # type: ignore[arg-type]


def _shifted(day: datetime.date, step: datetime.timedelta) -> datetime.date:
    try:
        return day + step
    except OverflowError:
        end = type(day).max if step > datetime.timedelta(0) else type(day).min
        return end.replace(tzinfo=day.tzinfo) if isinstance(day, datetime.datetime) and isinstance(end, datetime.datetime) else end


@dataclass(frozen=True, repr=False)
class ResultSet(ResultFrames):
    """One statement's released rows, their standard errors (aligned, None in key columns), the PEP 249
    description, and how it was answered (``explanation``); DuckDB-style frames of them through
    :mod:`dpsql.frames` (``df()``, ``arrow()``, ``pl()``, a notebook display, ``plot()``)."""

    description: tuple[tuple[object, ...], ...]
    rows: Sequence[Row]  # a list, or columns read into rows on demand (dpsql.columns)
    errors: Sequence[Row]
    explained_by: object = ""  # the explanation, or an object rendering it when read (``str()``)
    errors_shown: bool = False  # the rows hold <column>_stderr columns (:meth:`with_error_columns`)

    @cached_property
    def explanation(self) -> str:
        """How the statement was answered (rendered on first read)."""
        return str(self.explained_by)

    def fetchall(self) -> list[Row]:
        return list(self.rows)

    def summary(self) -> str:
        """``10 row(s) of (sex, race, n)``: what a repr shows instead of every row."""
        return f"{len(self.rows)} row(s) of ({', '.join(str(d[0]) for d in self.description)})"

    def __repr__(self) -> str:
        return f"<dpsql.ResultSet {self.summary()}>"

    def confidence_interval(self, level: float = 0.95) -> list[tuple[Interval | None, ...]]:
        return confidence_intervals(self.rows, self.errors, level)

    def explained(self, text: object) -> ResultSet:
        return replace(self, explained_by=text)

    def with_error_columns(self) -> ResultSet:
        """The result with ``<column>_stderr`` right after each column that carries an error in some row —
        the columns ``df(errors=True)`` adds — for tools that show only rows and columns (jupysql,
        ``pandas.read_sql``, a SQL client). The added columns carry no error of their own."""
        layout = error_layout(self.description, self.errors)
        if len(layout) == len(self.description):
            return self
        description = tuple(
            (f"{self.description[i][0]}{ERROR_SUFFIX}", NUMBER, None, None, None, None, True) if is_error else self.description[i]
            for i, is_error in layout
        )
        rows = [tuple(error[i] if is_error else row[i] for i, is_error in layout) for row, error in zip(self.rows, self.errors)]
        errors = [tuple(None if is_error else error[i] for i, is_error in layout) for error in self.errors]
        return replace(self, description=description, rows=rows, errors=errors, errors_shown=True)

    def _frame_source(self) -> FrameSource:
        return FrameSource(self.description, self.rows, self.errors, self.explanation, self.errors_shown)


def statement_result(
    statement: Statement,
    compiled: Sequence[CompiledQuery],
    description: tuple[tuple[object, ...], ...],
    values: Sequence[Sequence[np.ndarray]],
    variances: Sequence[Sequence[np.ndarray]],
    ranks: Sequence[RankVariances | None] | None = None,
    chosen: Sequence[ChosenCells | None] | None = None,
    keep_excluded: bool = False,
) -> ResultSet:
    """The result set of ``statement`` (whose PEP 249 ``description`` is given: it is public, computed once
    per compiled statement) from each branch's compiled query and its products' answers (and, per branch,
    the quantiles' rank variances when the plan gives them). GROUP BY cells the WHERE clause excludes are
    rows only with ``keep_excluded`` (module doc). Without HAVING, ORDER BY, LIMIT or OFFSET the
    rows stay columns until read (:mod:`dpsql.columns`: a batch may release millions)."""
    shown = len(statement.names)
    branch_ranks = ranks if ranks is not None else [None] * len(compiled)
    branch_chosen = chosen if chosen is not None else [None] * len(compiled)
    parts, error_parts = [], []
    for branch, query, branch_values, branch_variances, rank, picked in zip(
        statement.branches, compiled, values, variances, branch_ranks, branch_chosen
    ):
        columns, error_columns = _branch_columns(query, branch_values, branch_variances, rank, keep_excluded, picked)
        count = len(columns[0]) if columns else 0
        parts.append(tuple(Repeated(s.value, count) if isinstance(s, Constant) else columns[s] for s in branch.layout))
        error_parts.append(tuple(Repeated(None, count) if isinstance(s, Constant) else error_columns[s] for s in branch.layout))
    ordered = statement.order_by or statement.limit is not None or statement.offset
    if not ordered and all(b.having is None for b in statement.branches):
        return ResultSet(description, ColumnRows([p[:shown] for p in parts]), ColumnRows([p[:shown] for p in error_parts]))
    rows: list[Row] = []
    errors: list[Row] = []
    for branch, part, error_part in zip(statement.branches, parts, error_parts):
        for output, error in zip(ColumnRows([part]), ColumnRows([error_part])):
            if branch.having is None or holds(branch.having, output):
                rows.append(output)
                errors.append(error)
    rows, errors = _ordered(statement, rows, errors)
    return ResultSet(description, [r[:shown] for r in rows], [e[:shown] for e in errors])


def _branch_columns(
    compiled: CompiledQuery, values: Sequence[np.ndarray], variances: Sequence[np.ndarray], ranks: RankVariances | None = None,
    keep_excluded: bool = False,
    chosen: ChosenCells | None = None,
) -> tuple[list[Column], list[Column]]:
    """One row per shown GROUP BY cell, in domain order, as columns (values, and their standard errors: None
    in key columns): hidden remainder cells left out, and the cells the WHERE clause excludes unless
    ``keep_excluded`` (they are known to be empty: not measurements). Numbers read clean (:func:`clean_number`)."""
    key_cells = compiled.key_cells
    shown = compiled.listed_cells  # a key set's remainder and unreleased key tuples are not measurements
    if not keep_excluded and compiled.group_shape:
        shown = shown & ~compiled.structural_zeros.ravel()
    count = int(np.count_nonzero(shown))
    columns: list[Column] = []
    error_columns: list[Column] = []
    scale = compiled.scale
    if scale != 1:  # a count's answers are used as they are, not copied
        values = [np.asarray(v) / scale for v in values]
        variances = [np.asarray(v) / scale**2 for v in variances]
    released = Cells(compiled, values, variances, shown, {}, ranks, chosen)  # each kind releases its items from these
    for item, rows in zip(compiled.query.select, compiled.counts):
        kind = kinds.item_kind(item)
        if kind is None:  # a group key
            position = compiled.group_columns.index(item.column)
            labels = compiled.key_labels[position]
            cells = key_cells[position] if count == len(shown) else key_cells[position][shown]  # every cell shown: the shared keys
            columns.append(Labels(cells, labels))
            error_columns.append(Repeated(None, count))
            continue
        column, errors = kind.release(item, rows, released)
        columns.append(column)
        error_columns.append(errors)
    return columns, error_columns


@dataclass(frozen=True)
class OutputColumn:
    """One column of a statement's result, known before anything is read: its name, the kind of its
    values (``integer``, ``float``, ``text``, ``boolean``, ``date`` or ``timestamp``), whether it can be
    NULL, and whether its values are released measurements carrying a standard error (not group keys
    or ``GROUPING()`` constants)."""

    name: str
    kind: str
    null_ok: bool
    measured: bool

    @property
    def type_code(self) -> object:
        """The PEP 249 type object of :attr:`kind`."""
        return STRING if self.kind == "text" else DATETIME if self.kind in ("date", "timestamp") else NUMBER


def _value_kind(labels: Sequence[object], column_type: ColumnType | None) -> str:
    """The kind of a column's values: from its declared (or released) values, else from its engine type
    (a column whose keys are still to be selected), else ``float``."""
    present = [v for v in labels if v is not None and isinstance(v, (bool, int, float, decimal.Decimal, str, datetime.date))]
    if present:
        if all(isinstance(v, datetime.datetime) for v in present):
            return "timestamp"
        if all(isinstance(v, datetime.date) for v in present):
            return "date" if not any(isinstance(v, datetime.datetime) for v in present) else "timestamp"
        if all(isinstance(v, bool) for v in present):
            return "boolean"
        if all(isinstance(v, int) for v in present):
            return "integer" if all(INT64_MIN <= v <= INT64_MAX for v in present) else "numeric"  # type: ignore[operator]
        if all(isinstance(v, (int, float, decimal.Decimal)) for v in present):
            return "float"
        return "text"
    if column_type is None:
        return "float" if not labels else "text"
    return column_type.kind


def _columns_kind(column: ColumnDomain, column_type: ColumnType | None) -> str:
    """The kind of a declared column's values (its value cells' labels, else its engine type)."""
    return _value_kind(column.labels()[: column.value_cells], column_type)


def output_columns(
    statement: Statement, compiled: Sequence[CompiledQuery], column_types: Mapping[str, ColumnType] | None = None
) -> tuple[OutputColumn, ...]:
    """The result's columns from the compiled branches alone (``pipeline.describe``: nothing read).
    ``column_types`` (the table's) type a column whose keys are not selected yet."""
    types = column_types or {}
    described = []
    for position, name in enumerate(statement.names):
        kind, null_ok, measured, named = None, False, False, False
        for branch, query in zip(statement.branches, compiled):
            slot = branch.layout[position]
            if isinstance(slot, Constant):  # a rolled-up column's NULL, or a GROUPING() mask
                null_ok |= slot.value is None
                continue
            item = query.query.select[slot]
            aggregate = kinds.item_kind(item)
            if aggregate is None:  # a group key
                if not named:  # a group column shown unaliased has the table's spelling (dpsql.sql.compile)
                    name, named = item.name, True
                column = query.group_domain(item.column)
                kind = _value_kind(column.labels()[: column.value_cells], types.get(item.column))
                null_ok |= column.nullable
            else:  # a measured value: its type and whether it can be NULL, as its kind says
                kind, nullable = aggregate.output(item, query, lambda c, q=query: _columns_kind(q.columns[c], types.get(c)))
                null_ok, measured = null_ok or nullable, True
        if kind is None:  # constants in every branch: GROUPING()
            kind = "integer"
        described.append(OutputColumn(name, kind, null_ok, measured))
    return tuple(described)


def description_of(statement: Statement, compiled: Sequence[CompiledQuery]) -> tuple[tuple[object, ...], ...]:
    """PEP 249 ``description``: (name, type_code, display_size, internal_size, precision, scale, null_ok)."""
    return tuple((c.name, c.type_code, None, None, None, None, c.null_ok) for c in output_columns(statement, compiled))


def _sort_value(value: object) -> tuple[int, object]:
    """A key that orders values of any types without failing: numbers, then strings, dates, timestamps
    (naive before aware), then anything else by its text."""
    if isinstance(value, (bool, int, float, decimal.Decimal)):
        return (0, float(value))
    if isinstance(value, str):
        return (1, value)
    if isinstance(value, datetime.datetime):
        aware = value.tzinfo is not None and value.utcoffset() is not None
        return (3, value.timestamp()) if aware else (2, value.isoformat())
    if isinstance(value, datetime.date):
        return (2, value.isoformat())
    return (4, str(value))


def _ordered(statement: Statement, rows: list[Row], errors: list[Row]) -> tuple[list[Row], list[Row]]:
    """ORDER BY (NULLs last in both directions, as in DuckDB, unless NULLS FIRST is written), then OFFSET / LIMIT."""
    order = list(range(len(rows)))
    for key in reversed(statement.order_by):
        column, nulls_high = key.item, key.nulls_first == key.descending  # NULL sorts as the highest value when true
        order.sort(key=lambda r: ((rows[r][column] is None) == nulls_high, _sort_value(rows[r][column])), reverse=key.descending)
    end = None if statement.limit is None else statement.offset + statement.limit
    chosen = order[statement.offset : end]
    return [rows[i] for i in chosen], [errors[i] for i in chosen]
