"""``SUM``, ``AVG``, ``VARIANCE``, ``STDDEV`` of a bounded column or expression: its moment cells
(``dpsql.sql.moments``; expressions bounded by ``dpsql.sql.bounded_expressions``)."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dpsql.sql.parse import AGGREGATES, Aggregate, SelectItem, aggregate_argument, contribution_bounds

NAME = "moments"
EXPRESSIONS: tuple[type[exp.Expression], ...] = tuple(AGGREGATES)
ITEMS: tuple[type, ...] = (Aggregate,)


def parse(node: exp.Expression, name: str | None, column: Callable[[exp.Expression, str], str]) -> SelectItem:
    bounds = contribution_bounds(node)
    argument, expression = aggregate_argument(node, column)
    return Aggregate(name or node.sql(dialect="duckdb"), AGGREGATES[type(node)], argument, bounds, expression)


def vector(item: SelectItem) -> tuple[str, ...]:
    """The moment cells of what it aggregates (one per column or expression)."""
    return ("moments", item.column.lower())  # type: ignore[union-attr]


def node_vector(node: exp.Expression) -> tuple[str, ...]:
    argument = node.this.copy()
    for column in argument.find_all(exp.Column):
        for part in ("table", "db", "catalog"):
            column.set(part, None)
    return ("moments", (argument.name if isinstance(argument, exp.Column) else argument.sql(dialect="duckdb")).lower())
