"""The aggregate protocol: what every aggregate kind module provides (:class:`Kind`), and what the stages hand it.

A kind module (``counts``, ``moments``, ``quantiles``) answers, for the SELECT items it makes, every question a
stage of the pipeline asks about an aggregate; the stages ask through the registry (``dpsql.sql.kinds``) and never
test item types:

* **parse** (``dpsql.sql.parse.BranchChecker``): a call of the statement → a checked item, with the refusals the
  statement alone decides; the data vector an item (or a call of the text) is measured over;
* **compile** (``dpsql.sql.compile``): the item's names resolved against the table (:class:`Names`), the product it
  shares with other items, the column it ranks after the GROUP BY columns, whether its product ends with the moment
  cells of the aggregated value, and the factor and conjuncts its product adds to the GROUP BY cells;
* **SQL weights** (``dpsql.sql.kinds.weights``): what the one bounded read must compute for it — the moment cells
  of an aggregated value (:class:`dpsql.sql.moments.MomentNeed`), or the (unit, group cell) pairs of a unit;
* **release** (``dpsql.result``): its released values as a result column and its errors (:class:`Cells`), and the
  type and NULL-ability of that column before anything is read;
* **EXPLAIN** (``dpsql.explain``): the rows that say how the batch measures the kind's items;
* **local surveys** (``dpsql.local``): why a local survey cannot answer it, if it cannot, with a precedence (a
  statement refused for several items is told the first refusal of the lowest precedence).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
from sqlglot import exp

from dpsql.columns import Column, Objects, clean_number
from dpsql.schema import ColumnDomain, Schema
from dpsql.sql.parse import Predicate, Query, SelectItem

if TYPE_CHECKING:
    from dpsql.sql.compile import CompiledQuery, ProductRows
    from dpsql.sql.moments import MomentNeed, ValueEncoding
    from dpsql.workloads import CompiledBatch
    from planner import Factor

ColumnOf = Callable[[exp.Expression, str], str]
Vector = tuple[str, ...]
ExplainLine = tuple[str, str, "float | None", str]  # an EXPLAIN row: (kind, name, value, detail)

RankVariances = Callable[[int, str, float], "np.ndarray | None"]
"""(product index in the branch, quantiled column, fraction) → ``Var(F(k) − q·N)`` of the product's rows from
the plan (``quantiles.rank_block``), or None where the plan does not offer it."""
ChosenCells = Callable[[int, str, float], "np.ndarray | None"]
"""(product index in the branch, quantiled column, fraction) → indicators over the product's rows of the cells an
exponential mechanism released (``dpsql.sql.quantile_paths``), or None where the CDF answers."""


class Names(Protocol):
    """Compile's view of the statement's names (``dpsql.sql.compile``): the query as written, the table's schema and
    column names, the declared domains resolved so far, and :meth:`name`, which resolves a column that must have one."""

    query: Query
    schema: Schema
    table_columns: tuple[str, ...]
    columns: dict[str, ColumnDomain]

    def name(self, name: str, clause: str) -> str: ...


@dataclass
class Cells:
    """What a kind's release reads for one branch: its compiled query, each product's answers and variances (in
    rows), the GROUP BY cells shown, the columns' projected CDFs (shared by the quantiles of a column), and the plan's
    rank variances and an exponential mechanism's chosen cells where they exist."""

    compiled: CompiledQuery
    values: Sequence[np.ndarray]
    variances: Sequence[np.ndarray]
    shown: np.ndarray
    cdfs: dict[str, np.ndarray]
    ranks: RankVariances | None = None
    chosen: ChosenCells | None = None

    def block(self, rows: ProductRows | None, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """A product whose last factor has ``width`` rows per GROUP BY cell, as (cells × width) values and variances
        (zero where the product has no rows), and the flat GROUP BY cell of each of its rows' blocks (None without a
        product): each group cell owns consecutive rows."""
        compiled = self.compiled
        values = np.zeros((compiled.group_cells, width))
        variances = np.zeros((compiled.group_cells, width))
        if rows is None:
            return values, variances, None
        keys = rows.keys[::width]
        flat = np.ravel_multi_index(tuple(keys.T), compiled.group_shape) if compiled.group_shape else np.zeros(len(keys), dtype=int)
        values[flat] = np.asarray(self.values[rows.index]).reshape(-1, width)
        variances[flat] = np.asarray(self.variances[rows.index]).reshape(-1, width)
        return values, variances, flat

    def unreachable(self, rows: ProductRows | None) -> np.ndarray:
        """The GROUP BY cells no row can reach: those the WHERE clause excludes, or every cell without a product."""
        zeros = self.compiled.structural_zeros.ravel() if rows is not None else np.ones(self.compiled.group_cells, dtype=bool)
        return np.flatnonzero(zeros)

    def objects(self, released: list[object], errors: list[float | None]) -> tuple[Column, Column]:
        """The shown cells' released values (read clean, beside their errors) and their errors, as result columns."""
        shown = np.flatnonzero(self.shown)
        return Objects([clean_number(released[i], errors[i]) for i in shown]), Objects([clean_number(errors[i]) for i in shown])


class Kind(Protocol):
    """An aggregate kind: a module of ``dpsql.sql.kinds`` (the module doc says what each stage asks)."""

    NAME: str
    EXPRESSIONS: tuple[type[exp.Expression], ...]  # the sqlglot calls it answers
    ITEMS: tuple[type, ...]  # the checked SELECT items it makes
    VALUES: bool  # its product ends with the moment cells of the batch's aggregated value

    # parse
    def parse(self, node: exp.Expression, name: str | None, column: ColumnOf) -> SelectItem: ...
    def vector(self, item: SelectItem) -> Vector: ...
    def node_vector(self, node: exp.Expression) -> Vector: ...

    # compile
    def resolve(self, item: SelectItem, names: Names) -> SelectItem: ...
    def product_key(self, item: SelectItem) -> Hashable: ...
    def ranked(self, item: SelectItem) -> str | None: ...
    def counted(self, item: SelectItem) -> str | None: ...
    def block(
        self, item: SelectItem, columns: dict[str, ColumnDomain], value: ValueEncoding | None
    ) -> tuple[Factor | None, tuple[Predicate, ...]]: ...

    # SQL weights
    def moment_need(self, item: SelectItem, table: str, schema: Schema, table_columns: Sequence[str]) -> MomentNeed | None: ...
    def counted_unit(self, item: SelectItem) -> str | None: ...

    # release
    def release(self, item: SelectItem, rows: ProductRows | None, cells: Cells) -> tuple[Column, Column]: ...
    def output(self, item: SelectItem, compiled: CompiledQuery, values_kind: Callable[[str], str]) -> tuple[str, bool]: ...

    # EXPLAIN
    def explain(self, batch: CompiledBatch, see: Callable[[str], str]) -> list[ExplainLine]: ...

    # local surveys
    def local_refusal(self, item: SelectItem) -> tuple[int, str] | None: ...
