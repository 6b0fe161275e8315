"""``SUM``, ``AVG``, ``VARIANCE``, ``STDDEV`` of a bounded column or expression: its moment cells
(``dpsql.sql.moments``; expressions bounded by ``dpsql.sql.bounded_expressions``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.columns import Column
from dpsql.schema import ColumnDomain, Schema
from dpsql.sql.kinds.protocol import Cells, ExplainLine, Names
from dpsql.sql.moments import MomentNeed, ValueEncoding, aggregated
from dpsql.sql.parse import AGGREGATES, Aggregate, Predicate, SelectItem, aggregate_argument, contribution_bounds
from planner import Explicit, Factor

if TYPE_CHECKING:
    from dpsql.sql.compile import CompiledQuery, ProductRows
    from dpsql.workloads import CompiledBatch

NAME = "moments"
EXPRESSIONS: tuple[type[exp.Expression], ...] = tuple(AGGREGATES)
ITEMS: tuple[type, ...] = (Aggregate,)
VALUES = True


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


# compile


def resolve(item: SelectItem, names: Names) -> SelectItem:
    """What it aggregates, as the table spells it: it needs bounds, not a domain (checked by ``moments.encoding_for``)."""
    return dataclasses.replace(item, column=aggregated(item, names.table_columns, names.query.table))  # type: ignore[arg-type]


def product_key(item: SelectItem) -> Hashable:
    """Every aggregate of the column shares one product (its moment block)."""
    return item.column


def ranked(item: SelectItem) -> str | None:
    return None


def counted(item: SelectItem) -> str | None:
    return None


def block(item: SelectItem, columns: dict[str, ColumnDomain], value: ValueEncoding | None) -> tuple[Factor | None, tuple[Predicate, ...]]:
    """The GROUP BY cells × the moment block of the batch's aggregated value (its last attribute)."""
    assert value is not None
    return Factor((value.attribute,), Explicit(value.block())), ()


# SQL weights


def moment_need(item: SelectItem, table: str, schema: Schema, table_columns: Sequence[str]) -> MomentNeed | None:
    assert isinstance(item, Aggregate)
    return MomentNeed(aggregated(item, table_columns, table), item.function, item.expression, item.bounds)


def counted_unit(item: SelectItem) -> str | None:
    return None


# release


def release(item: SelectItem, rows: ProductRows | None, cells: Cells) -> tuple[Column, Column]:
    """Per shown GROUP BY cell, the delta-method answer from its moment cells (``ValueEncoding.released``) and its
    error. A cell no row can reach (WHERE) has SUM and COUNT 0 and no other aggregate (NULL, as in SQL)."""
    assert isinstance(item, Aggregate)
    encoding = cells.compiled.encoding
    assert encoding is not None
    values, variances, _ = cells.block(rows, len(encoding.block()))
    released, errors = encoding.released(item.function, values, variances)
    for cell in cells.unreachable(rows):
        released[cell], errors[cell] = (0.0, 0.0) if item.function in ("SUM", "COUNT") else (None, None)
    return cells.objects(released, errors)


def output(item: SelectItem, compiled: CompiledQuery, values_kind: Callable[[str], str]) -> tuple[str, bool]:
    """A float; NULL for a group without rows except SUM and COUNT."""
    return "float", item.function not in ("SUM", "COUNT")  # type: ignore[union-attr]


# EXPLAIN


def explain(batch: CompiledBatch, see: Callable[[str], str]) -> list[ExplainLine]:
    """The aggregated value's moment cells, when the batch aggregates one."""
    if batch.encoding is None:
        return []
    return [("aggregate", batch.encoding.column, float(batch.encoding.scale), f"{batch.encoding.describe()}; RMSEs in rows ({see('aggregate')})")]


def local_refusal(item: SelectItem) -> tuple[int, str] | None:
    return aggregated_refusal(item)


def aggregated_refusal(item: SelectItem) -> tuple[int, str]:
    """A local survey answers counts only (the same words for a quantile; precedence 0)."""
    return 0, (
        f"{item.function}({item.column}): a local survey answers COUNTs of its declared cells only; "  # type: ignore[union-attr]
        "sums, averages, variances and quantiles of reported values are not supported there"
    )
