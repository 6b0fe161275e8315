"""``MEDIAN``, ``PERCENTILE_CONT``/``_DISC``, ``QUANTILE_CONT``/``_DISC``, ``MIN``, ``MAX``: one CDF per column
over the rows (``dpsql.sql.quantiles``)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from dpsql.columns import Column
from dpsql.errors import NotSupportedError
from dpsql.schema import ColumnDomain, Schema
from dpsql.sql import quantiles
from dpsql.sql.kinds.moments import aggregated_refusal
from dpsql.sql.kinds.protocol import Cells, ExplainLine, Names
from dpsql.sql.moments import MomentNeed, ValueEncoding
from dpsql.sql.parse import QUANTILE_FUNCTIONS, Predicate, Quantile, Query, SelectItem, quantile_item
from planner import Factor

if TYPE_CHECKING:
    from dpsql.sql.compile import CompiledQuery, ProductRows
    from dpsql.workloads import CompiledBatch

NAME = "quantiles"
EXPRESSIONS: tuple[type[exp.Expression], ...] = tuple(QUANTILE_FUNCTIONS)
ITEMS: tuple[type, ...] = (Quantile,)
VALUES = False
ROWS = ("rows",)


def parse(node: exp.Expression, name: str | None, column: Callable[[exp.Expression, str], str]) -> SelectItem:
    found = quantile_item(node, name, column)
    assert found is not None  # registered by its expression types
    return found


def vector(item: SelectItem) -> tuple[str, ...]:
    return ROWS


def node_vector(node: exp.Expression) -> tuple[str, ...]:
    return ROWS


def items(queries: Iterable[Query]) -> list[Quantile]:
    """The quantiles the queries ask for, in order."""
    return [item for query in queries for item in query.select if isinstance(item, Quantile)]


# compile


def resolve(item: SelectItem, names: Names) -> SelectItem:
    """The quantiled column must have an ordered declared domain (``quantiles.check_column``) and not be grouped by."""
    assert isinstance(item, Quantile)
    column = names.name(item.column, f"SELECT {item.function}")
    quantiles.check_column(item, names.columns[column])
    query = names.query
    if column in query.group_by or column in {d.source for d in query.derived}:
        raise NotSupportedError(
            f"SELECT {item.function}({column}): the statement also groups by {column!r} (or an expression of it); "
            "quantiles of a column within groups of its own values are not supported"
        )
    return Quantile(item.name, item.function, column, item.fraction)


def product_key(item: SelectItem) -> Hashable:
    """Every quantile of the column shares one product (its CDF)."""
    return item.column


def ranked(item: SelectItem) -> str | None:
    """The quantiled column: an attribute of the domain right after the GROUP BY columns."""
    return item.column


def counted(item: SelectItem) -> str | None:
    return None


def block(item: SelectItem, columns: dict[str, ColumnDomain], value: ValueEncoding | None) -> tuple[Factor | None, tuple[Predicate, ...]]:
    """The GROUP BY cells × the CDF of the quantiled column."""
    return Factor((item.column,), quantiles.cdf_block(columns[item.column])), ()  # type: ignore[arg-type]


# SQL weights


def moment_need(item: SelectItem, table: str, schema: Schema, table_columns: Sequence[str]) -> MomentNeed | None:
    return None


def counted_unit(item: SelectItem) -> str | None:
    return None


# release


def release(item: SelectItem, rows: ProductRows | None, cells: Cells) -> tuple[Column, Column]:
    """Per shown GROUP BY cell, the quantile read from the column's CDF — projected once per column (``cells.cdfs``),
    ``quantiles.monotone`` — with its value error from the plan's rank variances, or the cell an exponential
    mechanism chose. A cell no row can reach (WHERE) has no quantile (NULL, as in SQL)."""
    assert isinstance(item, Quantile)
    compiled = cells.compiled
    domain = compiled.columns[item.column]
    width = domain.size
    values, variances, flat = cells.block(rows, width)
    rank_variances = None
    picked = None
    if rows is not None:
        assert flat is not None
        ranked = cells.ranks(rows.index, item.column, item.fraction) if cells.ranks is not None else None
        if ranked is not None:
            rank_variances = np.zeros((compiled.group_cells, width))
            rank_variances[flat] = np.asarray(ranked).reshape(-1, width) / compiled.scale**2
        indicators = cells.chosen(rows.index, item.column, item.fraction) if cells.chosen is not None else None
        if indicators is not None:
            marked = np.zeros((compiled.group_cells, width))
            marked[flat] = np.asarray(indicators).reshape(-1, width)
            picked = np.argmax(marked, axis=1)
    if item.column not in cells.cdfs:
        value_cells = domain.value_cells
        cells.cdfs[item.column] = quantiles.monotone(values[:, :value_cells], variances[:, :value_cells])
    released, errors = quantiles.released(item, domain, cells.cdfs[item.column], variances, rank_variances, picked)
    for cell in cells.unreachable(rows):
        released[cell], errors[cell] = None, None
    return cells.objects(released, errors)


def output(item: SelectItem, compiled: CompiledQuery, values_kind: Callable[[str], str]) -> tuple[str, bool]:
    """NULL for a group without rows; DISC, MIN and MAX show the column's values, CONT a float."""
    return ("float" if item.function == "PERCENTILE_CONT" else values_kind(item.column)), True  # type: ignore[union-attr]


# EXPLAIN


def explain(batch: CompiledBatch, see: Callable[[str], str]) -> list[ExplainLine]:
    """One CDF per quantiled column."""
    quantiled = {item.column: branch.columns[item.column] for statement in batch.statements for branch in statement.branches for item in items([branch.query])}
    return [
        (
            "quantile", column, float(domain.size),
            f"one cumulative count (CDF) per group over the {domain.size} cells of {column!r}, shared by its quantiles; "
            f"query RMSEs below are the CDF's, in rows ({see('quantile')})",
        )
        for column, domain in quantiled.items()
    ]


def local_refusal(item: SelectItem) -> tuple[int, str] | None:
    return aggregated_refusal(item)
