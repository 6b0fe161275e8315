"""``COUNT(*)``, ``COUNT(column)`` and ``COUNT(DISTINCT unit)``: counts of rows, or of (unit, group) pairs."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from dpsql.columns import Column, Floats
from dpsql.schema import ColumnDomain, Schema
from dpsql.sql.distinct_units import counted_unit as checked_unit
from dpsql.sql.kinds.protocol import Cells, ExplainLine, Names
from dpsql.sql.moments import MomentNeed, ValueEncoding, counted_by_moments, resolve as resolved_column
from dpsql.sql.parse import Aggregate, Count, IsNull, Not, Predicate, SelectItem, contribution_bounds, count_argument

if TYPE_CHECKING:
    from dpsql.sql.compile import CompiledQuery, ProductRows
    from dpsql.workloads import CompiledBatch
    from planner import Factor

NAME = "count"
EXPRESSIONS: tuple[type[exp.Expression], ...] = (exp.Count,)
ITEMS: tuple[type, ...] = (Count,)
VALUES = False
ROWS = ("rows",)
PAIRS = ("pairs",)


def parse(node: exp.Expression, name: str | None, column: Callable[[exp.Expression, str], str]) -> SelectItem:
    distinct = isinstance(node.this, exp.Distinct)
    contribution_bounds(node)  # checked; a count's contributions are the schema's rows per unit
    return Count(name or node.sql(dialect="duckdb"), count_argument(node, column), distinct)  # type: ignore[arg-type]


def vector(item: SelectItem) -> tuple[str, ...]:
    """Rows, or the (unit, group) pairs of ``COUNT(DISTINCT unit)`` (``dpsql.sql.distinct_units``)."""
    return PAIRS if item.distinct else ROWS  # type: ignore[union-attr]


def node_vector(node: exp.Expression) -> tuple[str, ...]:
    return PAIRS if isinstance(node, exp.Count) and isinstance(node.this, exp.Distinct) else ROWS


# compile


def resolve(item: SelectItem, names: Names) -> SelectItem:
    """``COUNT(*)`` as is; ``COUNT(DISTINCT unit)`` checked to count the privacy unit (its pairs with the group cells
    are what is counted: ``COUNT(*)`` over them); ``COUNT(unit)`` is ``COUNT(*)`` (rows without a unit are never
    counted); ``COUNT(column)`` of a column with bounds but no domain becomes an
    aggregate of its moment cells (``dpsql.sql.moments.counted_by_moments``), else a count of its non-NULL cells."""
    assert isinstance(item, Count)
    if item.column is None:
        return item
    table = names.query.table
    if item.distinct:
        checked_unit(item.column, names.schema, table, names.table_columns)
        return Count(item.name, None, distinct=True)
    unit = names.schema.privacy_unit
    if unit is not None and resolved_column(item.column, names.table_columns, table, "SELECT COUNT") == unit:
        return Count(item.name, None)  # bounding drops rows without a unit: COUNT(unit) counts what COUNT(*) counts
    if counted_by_moments(item, names.schema, names.table_columns, table):  # bounds, no domain
        return Aggregate(item.name, "COUNT", resolved_column(item.column, names.table_columns, table, "SELECT COUNT"))
    return Count(item.name, names.name(item.column, "SELECT COUNT"))


def product_key(item: SelectItem) -> Hashable:
    """COUNTs of the same column share a product."""
    return item.column


def ranked(item: SelectItem) -> str | None:
    return None


def counted(item: SelectItem) -> str | None:
    """The column ``COUNT(column)`` names (None for ``COUNT(*)``)."""
    return item.column


def block(item: SelectItem, columns: dict[str, ColumnDomain], value: ValueEncoding | None) -> tuple[Factor | None, tuple[Predicate, ...]]:
    """The GROUP BY cells; ``COUNT(column)`` of a nullable column (or of a key set's) adds ``column IS NOT NULL``."""
    column = item.column
    if column is not None and (columns[column].nullable or columns[column].kind == "keys"):
        return None, (Not(IsNull(column)),)
    return None, ()


# SQL weights


def moment_need(item: SelectItem, table: str, schema: Schema, table_columns: Sequence[str]) -> MomentNeed | None:
    """``COUNT(column)`` of a column with bounds but no declared domain counts that column's moment cells."""
    assert isinstance(item, Count)
    if not counted_by_moments(item, schema, table_columns, table):
        return None
    return MomentNeed(resolved_column(item.column, table_columns, table, "SELECT COUNT"), "COUNT")  # type: ignore[arg-type]


def counted_unit(item: SelectItem) -> str | None:
    """The unit ``COUNT(DISTINCT unit)`` counts: the read computes its (unit, group cell) pairs."""
    return item.column if item.distinct else None  # type: ignore[union-attr]


# release


def release(item: SelectItem, rows: ProductRows | None, cells: Cells) -> tuple[Column, Column]:
    """Each shown GROUP BY cell's count and its standard error; a cell no row can reach (WHERE) is an exact 0."""
    compiled, shown = cells.compiled, cells.shown
    if rows is not None and rows.in_cell_order and shown.all() and not compiled.structural_zeros.any():
        value = np.asarray(cells.values[rows.index], dtype=float).reshape(-1)  # each cell shown, in order: the answers as they are
        variance = np.asarray(cells.variances[rows.index], dtype=float).reshape(-1)
    else:
        value = np.zeros(compiled.group_cells)
        variance = np.zeros(compiled.group_cells)
        if rows is not None:
            shape = compiled.group_shape
            flat = np.ravel_multi_index(tuple(rows.keys.T), shape) if shape else np.zeros(len(rows.keys), dtype=int)
            value[flat] = cells.values[rows.index]
            variance[flat] = cells.variances[rows.index]
            zeros = compiled.structural_zeros.ravel()
            value[zeros], variance[zeros] = 0.0, 0.0
        value, variance = value[shown], variance[shown]
    error = np.maximum(variance, 0.0)
    np.sqrt(error, out=error)
    return Floats(value, error), Floats(error)


def output(item: SelectItem, compiled: CompiledQuery, values_kind: Callable[[str], str]) -> tuple[str, bool]:
    return "float", False


# EXPLAIN


def explain(batch: CompiledBatch, see: Callable[[str], str]) -> list[ExplainLine]:
    """How many group cells one unit's pairs may fall in, when the batch counts distinct units."""
    if batch.distinct is None:
        return []
    return [("bounding", "groups per unit", float(batch.distinct.contributions), batch.distinct.describe())]


def local_refusal(item: SelectItem) -> tuple[int, str] | None:
    """A distinct count (told after any aggregate of values: precedence 1)."""
    if not item.distinct:  # type: ignore[union-attr]
        return None
    return 1, (
        f"{item.name}: a local survey answers COUNTs of its declared cells only; each unit sends one report "
        "about one record, so count units with COUNT(*) instead"
    )
