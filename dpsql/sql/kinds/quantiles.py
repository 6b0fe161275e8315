"""``MEDIAN``, ``PERCENTILE_CONT``/``_DISC``, ``QUANTILE_CONT``/``_DISC``, ``MIN``, ``MAX``: one CDF per column
over the rows (``dpsql.sql.quantiles``)."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dpsql.sql.parse import QUANTILE_FUNCTIONS, Quantile, SelectItem, quantile_item

NAME = "quantiles"
EXPRESSIONS: tuple[type[exp.Expression], ...] = tuple(QUANTILE_FUNCTIONS)
ITEMS: tuple[type, ...] = (Quantile,)
ROWS = ("rows",)


def parse(node: exp.Expression, name: str | None, column: Callable[[exp.Expression, str], str]) -> SelectItem:
    found = quantile_item(node, name, column)
    assert found is not None  # registered by its expression types
    return found


def vector(item: SelectItem) -> tuple[str, ...]:
    return ROWS


def node_vector(node: exp.Expression) -> tuple[str, ...]:
    return ROWS
