"""``COUNT(*)``, ``COUNT(column)`` and ``COUNT(DISTINCT unit)``: counts of rows, or of (unit, group) pairs."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dpsql.sql.parse import Count, SelectItem, contribution_bounds, count_argument

NAME = "count"
EXPRESSIONS: tuple[type[exp.Expression], ...] = (exp.Count,)
ITEMS: tuple[type, ...] = (Count,)
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
