"""Aggregate kinds: one module per kind, registered by the sqlglot expression types it answers.

Each kind (:mod:`.counts`, :mod:`.moments`, :mod:`.quantiles`) is a module that implements the aggregate protocol
(:class:`.protocol.Kind`): for its SELECT items it owns the parse and its refusals, the data vector an item is
measured over, the block it compiles to, the SQL weights the read computes for it, how its released values become
row values, its EXPLAIN rows and its refusal in a local survey. Every stage dispatches through :func:`kind_of` (a
call of the statement) and :func:`item_kind` (a checked item) instead of testing types, so a new aggregate kind is
one module added to :data:`KINDS` (``tests/test_architecture.py`` refuses type tests of its items elsewhere).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.schema import Schema
from dpsql.sql import distinct_units, moments as moment_cells
from dpsql.sql.kinds import counts, moments, quantiles
from dpsql.sql.kinds.protocol import ColumnOf, Kind, Vector
from dpsql.sql.parse import Query, SelectItem

if TYPE_CHECKING:
    from dpsql.sql.distinct_units import DistinctUnits
    from dpsql.sql.moments import ValueEncoding
    from dpsql.sql.statement import Statement

__all__ = ["KINDS", "ColumnOf", "Kind", "Vector", "counted_columns", "item_kind", "kind_of", "measured", "parse_item", "weights"]

KINDS: tuple[Kind, ...] = (counts, moments, quantiles)  # type: ignore[assignment]  # modules implementing the protocol
_BY_EXPRESSION = {t: kind for kind in KINDS for t in kind.EXPRESSIONS}
_BY_ITEM = {t: kind for kind in KINDS for t in kind.ITEMS}


def kind_of(node: exp.Expression) -> Kind | None:
    """The kind that answers a call of the statement, or None."""
    if isinstance(node, exp.WithinGroup):  # PERCENTILE_CONT(q) WITHIN GROUP (…); the quantiles kind refuses any other
        return _BY_EXPRESSION[exp.PercentileCont]
    return _BY_EXPRESSION.get(type(node))


def item_kind(item: SelectItem) -> Kind | None:
    """The kind of a checked SELECT item (None for a group key)."""
    return _BY_ITEM.get(type(item))


def measured(item: SelectItem) -> bool:
    """Whether the item is an aggregate (a measured value), not a group key."""
    return type(item) in _BY_ITEM


def counted_columns(query: Query) -> list[str]:
    """The columns the query's items count the non-NULL rows of (``COUNT(column)``), in order."""
    return [c for item in query.select if (kind := item_kind(item)) is not None and (c := kind.counted(item)) is not None]


def parse_item(node: exp.Expression, name: str | None, column: ColumnOf) -> SelectItem | None:
    """A SELECT item (alias removed) read by its kind, or None when no kind answers it."""
    kind = kind_of(node)
    return None if kind is None else kind.parse(node, name, column)


def weights(
    statements: Sequence[Statement], schema: Schema, table_columns: Sequence[str], zero_nulls: bool = True
) -> tuple[DistinctUnits | None, ValueEncoding | None]:
    """The SQL weights the batch's one read computes, as its items' kinds ask: the (unit, group cell) pairs of a
    counted unit (``dpsql.sql.distinct_units``), and the moment cells of the one aggregated value
    (``dpsql.sql.moments.encoding_for``; ``zero_nulls`` is its)."""
    branches = [b for s in statements for b in s.branches]
    asked = [(b.query, item, kind) for b in branches for item in b.query.select if (kind := item_kind(item)) is not None]
    units = [(query, unit) for query, item, kind in asked if (unit := kind.counted_unit(item)) is not None]
    distinct = distinct_units.for_batch(units, len(branches), schema, table_columns)
    needs = (kind.moment_need(item, query.table, schema, table_columns) for query, item, kind in asked)
    return distinct, moment_cells.encoding_for([n for n in needs if n is not None], schema, zero_nulls)
