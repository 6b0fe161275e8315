"""The one SQL statement a query sends to the backend: contribution bounding + the marginals.

Built as a sqlglot AST so any backend can transpile it to its dialect::

    SELECT c0, c1, [GROUPING(c0, c1) AS grouping_id,] COUNT(*) AS n
    FROM (
      SELECT c0, c1, ROW_NUMBER() OVER (PARTITION BY unit ORDER BY HASH(c0, c1, <salt>)) AS row_in_unit
      FROM (SELECT <cell index of col0> AS c0, <cell index of col1> AS c1, ..., <unit> AS unit FROM <table>)
      WHERE c0 IS NOT NULL AND c1 IS NOT NULL AND ... AND unit IS NOT NULL AND <WHERE as cell masks>
    ) WHERE row_in_unit <= <max_rows_per_unit>
    GROUP BY [GROUPING SETS] (...)

A cell index expression maps a column value to its cell number in the public domain (``CASE``),
or to NULL when the value is outside the domain (or NULL in a column not declared nullable): such
rows are dropped before bounding. Each unit keeps at most ``max_rows_per_unit`` rows, chosen by a
salted hash of the row's cells (a fresh random salt per statement), so the choice is random and
depends on that unit's own rows only. The WHERE clause (as masks over cell indices, see
:class:`~dpsql.sql.compile.CellFilter`) is applied before bounding too, so a unit's kept rows are
chosen among the rows the statement counts; the workload applies the same masks again. Without a privacy unit (one row = one unit) the window is
omitted. Rows whose privacy-unit value is NULL are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from sqlglot import exp

from dpsql.schema import ColumnDomain
from dpsql.sql.compile import CellFilter

NUMERIC_TYPE_PREFIXES = (
    "TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
    "UBIGINT", "UHUGEINT", "DECIMAL", "NUMERIC", "DOUBLE", "FLOAT", "REAL",
)
INTEGER_TYPE_PREFIXES = ("TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT")
COUNT_NAME = "n"
GROUPING_NAME = "grouping_id"
ROW_NUMBER_NAME = "row_in_unit"
UNIT_NAME = "unit"


def is_numeric_type(type_name: str) -> bool:
    return type_name.upper().startswith(NUMERIC_TYPE_PREFIXES)


def is_integer_type(type_name: str) -> bool:
    upper = type_name.upper()
    return upper.startswith(INTEGER_TYPE_PREFIXES) and not upper.startswith(("INTERVAL",))


@dataclass(frozen=True)
class BoundedAggregation:
    """What to compute: marginals over ``cell_columns`` of the bounded rows of ``table``."""

    table: str
    columns: Mapping[str, ColumnDomain]  # every column the statement mentions, by name
    column_types: Mapping[str, str]  # backend type name of each mentioned column
    marginals: tuple[tuple[str, ...], ...]  # attribute tuples to count over
    privacy_unit: str | None
    max_rows_per_unit: int
    salt: int  # random per statement; orders each unit's rows for bounding
    row_filters: tuple[CellFilter, ...] = ()  # the WHERE clause, applied before bounding

    def alias(self, column: str) -> str:
        return f"c{list(self.columns).index(column)}"

    def statement(self) -> exp.Select:
        cells = exp.select(*(exp.alias_(self._cell_index(c), self.alias(c)) for c in self.columns))
        if self.privacy_unit is not None:
            cells = cells.select(exp.alias_(exp.column(self.privacy_unit, quoted=True), UNIT_NAME))
        cells = cells.from_(exp.Table(this=exp.to_identifier(self.table, quoted=True)))
        filters = [exp.column(self.alias(c)).is_(exp.null()).not_() for c in self.columns]
        filters += [self._filter(f) for f in self.row_filters]
        if self.privacy_unit is not None:
            filters.append(exp.column(UNIT_NAME).is_(exp.null()).not_())
        kept = exp.select(*self._counted_references()).from_(cells.subquery("cells"))
        if filters:
            kept = kept.where(exp.and_(*filters))
        if self.privacy_unit is not None:
            kept = self._bounded(kept)
        return self._aggregate(kept)

    @property
    def counted_columns(self) -> tuple[str, ...]:
        """Columns that appear in some marginal, in statement order."""
        wanted = {c for marginal in self.marginals for c in marginal}
        return tuple(c for c in self.columns if c in wanted)

    def _filter(self, cell_filter: CellFilter) -> exp.Expression:
        """``flat cell index over the filter's scope IN (cells where the mask holds)`` (or NOT IN the others)."""
        strides = np.cumprod((1,) + cell_filter.mask.shape[:0:-1])[::-1]
        terms: list[exp.Expression] = []
        for column, stride in zip(cell_filter.scope, strides):
            reference = exp.column(self.alias(column))
            terms.append(reference if stride == 1 else exp.Mul(this=reference, expression=exp.Literal.number(int(stride))))
        flat = terms[0]
        for term in terms[1:]:
            flat = exp.Add(this=flat, expression=term)
        selected = np.flatnonzero(cell_filter.mask.ravel())
        rejected = np.flatnonzero(~cell_filter.mask.ravel())
        listed = selected if len(selected) <= len(rejected) else rejected
        membership = exp.In(this=flat, expressions=[exp.Literal.number(int(i)) for i in listed])
        return membership if listed is selected else exp.Not(this=membership)

    def _counted_references(self) -> list[exp.Expression]:
        """The counted cell columns (a constant when only the total is counted: SELECT needs a column)."""
        counted = [exp.column(self.alias(c)) for c in self.counted_columns]
        return counted or [exp.alias_(exp.Literal.number(1), "one")]

    def _bounded(self, kept: exp.Select) -> exp.Select:
        order_key = exp.func(
            "HASH", exp.column(UNIT_NAME), *(exp.column(self.alias(c)) for c in self.counted_columns), exp.Literal.number(self.salt)
        )
        window = exp.Window(
            this=exp.RowNumber(),
            partition_by=[exp.column(UNIT_NAME)],
            order=exp.Order(expressions=[exp.Ordered(this=order_key)]),
        )
        numbered = kept.select(exp.alias_(window, ROW_NUMBER_NAME))
        outer = exp.select(*self._counted_references()).from_(numbered.subquery("numbered"))
        return outer.where(exp.column(ROW_NUMBER_NAME) <= exp.Literal.number(self.max_rows_per_unit))

    def _aggregate(self, kept: exp.Select) -> exp.Select:
        counted = [exp.column(self.alias(c)) for c in self.counted_columns]
        query = exp.select(*counted).from_(kept.subquery("bounded"))
        if len(self.marginals) > 1:
            query = query.select(exp.alias_(exp.func("GROUPING", *counted), GROUPING_NAME)) if counted else query
            sets = [exp.Tuple(expressions=[exp.column(self.alias(c)) for c in m]) for m in self.marginals]
            query = query.select(exp.alias_(exp.Count(this=exp.Star()), COUNT_NAME))
            return query.group_by(exp.GroupingSets(expressions=sets))
        query = query.select(exp.alias_(exp.Count(this=exp.Star()), COUNT_NAME))
        return query.group_by(*counted) if counted else query

    def grouping_id(self, marginal: tuple[str, ...]) -> int:
        """The ``GROUPING(...)`` value of the rows belonging to ``marginal``."""
        counted = self.counted_columns
        return sum(1 << (len(counted) - 1 - i) for i, c in enumerate(counted) if c not in marginal)

    def marginal_arrays(self, result: Mapping[str, np.ndarray]) -> dict[tuple[str, ...], np.ndarray]:
        """Dense count arrays (shape = domain sizes, in the marginal's order) from the statement's result."""
        counts = np.asarray(np.ma.filled(result[COUNT_NAME], 0), dtype=np.int64)
        chosen_all = np.ones(len(counts), dtype=bool)
        if len(self.marginals) > 1 and self.counted_columns:
            ids = np.asarray(np.ma.filled(result[GROUPING_NAME], -1))
        arrays = {}
        for marginal in self.marginals:
            chosen = chosen_all if len(self.marginals) == 1 or not self.counted_columns else ids == self.grouping_id(marginal)
            shape = tuple(self.columns[c].size for c in marginal)
            if not marginal:
                arrays[marginal] = np.array(counts[chosen].sum(), dtype=np.int64)
                continue
            table = np.zeros(shape, dtype=np.int64)
            index = tuple(np.asarray(np.ma.filled(result[self.alias(c)], 0), dtype=np.int64)[chosen] for c in marginal)
            np.add.at(table, index, counts[chosen])
            arrays[marginal] = table
        return arrays

    # -- cell index expressions ----------------------------------------------------------------------
    def _cell_index(self, name: str) -> exp.Expression:
        column = self.columns[name]
        reference = exp.column(name, quoted=True)
        type_name = self.column_types[name]
        case = exp.Case()
        if column.nullable:
            case = case.when(reference.is_(exp.null()), exp.Literal.number(column.null_cell))
        if column.kind == "categories":
            for index, value in enumerate(column.values):
                case = case.when(exp.EQ(this=reference.copy(), expression=_literal(value, type_name)), exp.Literal.number(index))
        elif column.kind == "range":
            low, high = int(column.values[0]), int(column.values[1])
            condition: exp.Expression = exp.Between(this=reference.copy(), low=exp.Literal.number(low), high=exp.Literal.number(high))
            if not is_integer_type(type_name):
                condition = exp.and_(condition, exp.EQ(this=reference.copy(), expression=exp.func("FLOOR", reference.copy())))
            offset = exp.Sub(this=exp.cast(reference.copy(), "BIGINT"), expression=exp.Literal.number(low))
            case = case.when(condition, offset)
        else:
            edges = column.values
            case = case.when(exp.LT(this=reference.copy(), expression=exp.Literal.number(edges[0])), exp.null())
            for index, upper in enumerate(edges[1:]):
                case = case.when(exp.LT(this=reference.copy(), expression=exp.Literal.number(upper)), exp.Literal.number(index))
        return case


def _literal(value: object, type_name: str) -> exp.Expression:
    """A category value as a literal comparable with a column of ``type_name``."""
    if isinstance(value, bool):
        return exp.Boolean(this=value) if type_name.upper() == "BOOLEAN" else exp.Literal.string(str(value).lower())
    if isinstance(value, (int, float)) and is_numeric_type(type_name):
        return exp.Literal.number(value) if value >= 0 else exp.Neg(this=exp.Literal.number(-value))
    return exp.Literal.string(value if isinstance(value, str) else str(value))


def check_column_types(columns: Mapping[str, ColumnDomain], column_types: Mapping[str, str], table: str) -> list[str]:
    """Problems (as messages naming the column) between declared domains and the table's column types."""
    problems = []
    for name, column in columns.items():
        if not column.is_known or name not in column_types:
            continue
        type_name = column_types[name]
        numeric = is_numeric_type(type_name)
        if column.kind in ("range", "bins") and not numeric:
            problems.append(f"column {name!r} of {table!r} has type {type_name}, but its {column.kind} domain needs numbers")
        if column.kind == "categories" and numeric and any(isinstance(v, str) for v in column.values):
            problems.append(f"column {name!r} of {table!r} has numeric type {type_name}, but its categories are strings")
    return problems

