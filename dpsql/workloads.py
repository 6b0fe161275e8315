"""Checked statements → ONE ``planner.Workload``, and its answers → each statement's result set.

Every branch (grouping set) of every statement is compiled on its own (``dpsql.sql.compile``) against the
table's schema; the products of all branches, each scaled by its statement's weight, form one workload
over the union of the columns they read. When every branch has the same WHERE clause it runs in SQL on
the bounded rows (as for a single statement) and the branches measure their GROUP BY cells; otherwise —
or when the WHERE clause reads a column whose cells are only known after key bounding (a released key
set), or the caller asks for it (local surveys) — each branch keeps its WHERE as masks in its products
and the bounded rows are counted unfiltered (the same rows either way: the WHERE never changes which
rows a unit keeps). Answers to the merged workload map back to each statement's
products, in the statement's own attribute order.

A derived GROUP BY column (``dpsql.sql.derived``) is an attribute of the workload that the table does
not have: the engine reads counts over its source column instead (:meth:`CompiledBatch.read_marginals`)
and sums them into the derived cells through the column's public map (:meth:`CompiledBatch.folded`),
exactly and before any noise, so the plan measures the derived cells themselves.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from dpsql.result import ResultSet, description_of, statement_result
from dpsql.schema import ColumnDomain, Schema
from dpsql.sql.compile import MAX_RELEASED_ROWS, CellFilter, CompiledQuery, DerivedAttribute, compile_query, released_rows, statement_counts
from dpsql.sql import kinds
from dpsql.sql.distinct_units import DistinctUnits
from dpsql.sql.moments import ValueEncoding
from dpsql.sql.quantiles import rank_block
from dpsql.sql.statement import Statement
from planner import Domain, Factor, Product, Workload

T = TypeVar("T")


@dataclass(frozen=True)
class CompiledStatement:
    statement: Statement
    branches: tuple[CompiledQuery, ...]
    first_products: tuple[int, ...]  # per branch: index of its first product in the merged workload
    weight: float

    @functools.cached_property
    def description(self) -> tuple[tuple[object, ...], ...]:
        """PEP 249 ``description`` of the statement's result (public: computed once per compiled statement)."""
        return description_of(self.statement, self.branches)


@dataclass(frozen=True)
class CompiledBatch:
    """Statements compiled and merged: one workload (None when every count is zero by construction)."""

    statements: tuple[CompiledStatement, ...]
    workload: Workload | None
    row_filters: tuple[CellFilter, ...]  # the WHERE clause every branch shares, run in SQL on the bounded rows
    own_products: tuple[Product, ...]  # each merged product as its branch compiled it (its row order)
    encoding: ValueEncoding | None = None  # the aggregated column's moment cells (``dpsql.sql.moments``)
    distinct: DistinctUnits | None = None  # COUNT(DISTINCT unit): (unit, group cell) pairs are counted, not rows
    excluded_cells: str = "omit"  # GROUP BY cells the WHERE clause excludes: omitted from the rows, or exact "zeros"

    def with_encoding(self, encoding: ValueEncoding) -> CompiledBatch:
        """The batch whose answers read ``encoding`` (the same cells: a clip chosen after the read,
        ``dpsql.sql.clipping``)."""
        statements = tuple(
            dataclasses.replace(s, branches=tuple(dataclasses.replace(b, encoding=encoding) if b.encoding is not None else b for b in s.branches))
            for s in self.statements
        )
        return dataclasses.replace(self, statements=statements, encoding=encoding)

    @functools.cached_property
    def measures(self) -> bool:
        """Whether some statement asks for a measured value (not only group keys)."""
        return any(kinds.measured(item) for s in self.statements for b in s.branches for item in b.query.select)

    @property
    def scale(self) -> int:
        """Units of weight per row in the data vector (multiplies the sensitivity)."""
        return 1 if self.encoding is None else self.encoding.scale

    @functools.cached_property
    def columns(self) -> dict[str, ColumnDomain]:
        """Every column some branch mentions, with the domain it was compiled with."""
        return self._over_branches(lambda branch: branch.columns)

    @functools.cached_property
    def derived(self) -> dict[str, DerivedAttribute]:
        """Every derived GROUP BY attribute of some branch (one map per expression: one schema)."""
        return self._over_branches(lambda branch: branch.derived)

    def _over_branches(self, entries: Callable[[CompiledQuery], dict[str, T]]) -> dict[str, T]:
        """The union of every branch's ``entries``, the first branch naming a key giving its value."""
        found: dict[str, T] = {}
        for statement in self.statements:
            for branch in statement.branches:
                for name, value in entries(branch).items():
                    found.setdefault(name, value)
        return found

    def read_attributes(self, attributes: Sequence[str]) -> tuple[str, ...]:
        """The table columns that give ``attributes``: a derived attribute's source in its place."""
        derived = self.derived
        return tuple(dict.fromkeys(derived[a].source if a in derived else a for a in attributes))

    def read_marginals(self, marginals: Sequence[tuple[str, ...]]) -> tuple[tuple[str, ...], ...]:
        """The marginals to read from the table for the plan's ``marginals`` (see :meth:`folded`)."""
        return tuple(dict.fromkeys(self.read_attributes(m) for m in marginals))

    def folded(self, marginals: Sequence[tuple[str, ...]], read: dict[tuple[str, ...], np.ndarray]) -> dict[tuple[str, ...], np.ndarray]:
        """The plan's ``marginals`` from the marginals read over source columns: each source cell's count
        added to the derived cells its values map to (a public map: exact, before any noise)."""
        derived = self.derived
        folded = {}
        for marginal in marginals:
            source = self.read_attributes(marginal)
            table = read[source]
            if source == marginal:
                folded[marginal] = table
                continue
            cells = np.indices(table.shape).reshape(len(source), -1)
            target = []
            for attribute in marginal:
                if attribute in derived:
                    target.append(derived[attribute].map.cell_of[cells[source.index(derived[attribute].source)]])
                else:
                    target.append(cells[source.index(attribute)])
            assert self.workload is not None
            out = np.zeros(self.workload.domain.shape(marginal), dtype=table.dtype)
            np.add.at(out, tuple(target), table.reshape(-1))
            folded[marginal] = out
        return folded

    def results(
        self, values: Sequence[np.ndarray], variances: Sequence[np.ndarray], variances_of: Callable[[Product], np.ndarray | None] | None = None,
        chosen: Mapping[tuple[int, float], np.ndarray] | None = None,
    ) -> list[ResultSet]:
        """Each statement's result set from per-product answers of the merged workload (empty sequences
        when the workload is None). ``variances_of`` (the plan's, when every product was answered by it)
        prices the quantiles' rank errors (``quantiles.rank_block``); ``chosen`` holds, per (merged CDF product,
        fraction), the cells an exponential mechanism released, as indicators over the product's rows
        (``dpsql.sql.quantile_paths``)."""
        values = [_rows_in_order_of(v, own, merged) for v, own, merged in zip(values, self.own_products, self._merged())]
        variances = [_rows_in_order_of(v, own, merged) for v, own, merged in zip(variances, self.own_products, self._merged())]
        results = []
        for compiled in self.statements:
            per_branch_values, per_branch_variances, per_branch_ranks, per_branch_chosen = [], [], [], []
            for branch, first in zip(compiled.branches, compiled.first_products):
                count = 0 if branch.workload is None else len(branch.workload.products)
                per_branch_values.append(values[first : first + count])
                per_branch_variances.append(variances[first : first + count])
                per_branch_ranks.append(None if variances_of is None else functools.partial(self._rank_variances, variances_of, first))
                per_branch_chosen.append(None if not chosen else functools.partial(self._chosen_cells, chosen, first))
            results.append(
                statement_result(
                    compiled.statement, compiled.branches, compiled.description, per_branch_values, per_branch_variances, per_branch_ranks,
                    keep_excluded=self.excluded_cells == "zeros", chosen=per_branch_chosen,
                )
            )
        return results

    def _rank_variances(self, variances_of: Callable[[Product], np.ndarray | None], first: int, index: int, column: str, fraction: float) -> np.ndarray | None:
        """``Var(F(k) − q·N)`` for the rows of a branch's quantile product (its ``index``-th), in the branch's
        row order: the merged product with its CDF block swapped for ``quantiles.rank_block``."""
        own, merged = self.own_products[first + index], self._merged()[first + index]
        swapped = Product(
            merged.domain,
            tuple(Factor(f.attributes, rank_block(f.block, self.columns[column], fraction)) if f.attributes == (column,) else f for f in merged.factors),
            merged.weight,
        )
        found = variances_of(swapped)
        return None if found is None else _rows_in_order_of(found, own, merged)

    def _chosen_cells(self, chosen: Mapping[tuple[int, float], np.ndarray], first: int, index: int, column: str, fraction: float) -> np.ndarray | None:
        """The indicator rows of a branch's quantile product (its ``index``-th) marking the released cells, in
        the branch's row order (None: the CDF answers this quantile)."""
        found = chosen.get((first + index, fraction))
        return None if found is None else _rows_in_order_of(found, self.own_products[first + index], self._merged()[first + index])

    def _merged(self) -> tuple[Product, ...]:
        return () if self.workload is None else self.workload.products


def compile_batch(
    statements: Sequence[Statement],
    weights: Sequence[float],
    schema: Schema,
    table_columns: Sequence[str],
    masks_only: bool = False,
    row_limit: float = MAX_RELEASED_ROWS,
    excluded_cells: str = "omit",
    zero_nulls: bool = True,
) -> CompiledBatch:
    """Compile every branch of every statement against ``schema`` and merge them (see the module doc).
    More than ``row_limit`` GROUP BY cells in all is refused; a batch recompiled over released keys after
    the charge passes ``math.inf`` (nothing may fail there, and the keys' number is the data's).
    ``excluded_cells`` says whether the results show the GROUP BY cells the WHERE clause excludes; ``zero_nulls``
    is :func:`dpsql.sql.moments.encoding_for`'s (the SQL weights: :func:`dpsql.sql.kinds.weights`)."""
    distinct, encoding = kinds.weights(statements, schema, table_columns, zero_nulls)
    compiled, rows_left = [], row_limit
    for statement in statements:
        branches = []
        for branch in statement.branches:
            branches.append(compile_query(branch.query, schema, table_columns, encoding, rows_left))
            rows_left -= released_rows(branches[-1])
        compiled.append(branches)
    flat = [c for branches in compiled for c in branches]
    keyed = {name for c in flat for name, column in c.columns.items() if column.kind == "keys"}
    shared = {tuple(sorted(_filter_key(f) for f in c.row_filters)) for c in flat}
    filters_in_sql = not masks_only and len(shared) == 1 and not any(set(f.scope) & keyed for f in flat[0].row_filters)
    if not filters_in_sql:
        compiled = [[_with_masks(c) for c in branches] for branches in compiled]
    domain = _union_domain([c for branches in compiled for c in branches])
    products: list[Product] = []
    own: list[Product] = []
    merged_statements = []
    for statement, branches, weight in zip(statements, compiled, weights):
        firsts = []
        for branch in branches:
            firsts.append(len(products))
            if branch.workload is not None:
                own.extend(branch.workload.products)
                products.extend(Product(domain, p.factors, p.weight * weight) for p in branch.workload.products)
        merged_statements.append(CompiledStatement(statement, tuple(branches), tuple(firsts), weight))
    workload = Workload(domain, tuple(products)) if products else None
    row_filters = flat[0].row_filters if filters_in_sql and flat else ()
    return CompiledBatch(tuple(merged_statements), workload, row_filters, tuple(own), encoding, distinct, excluded_cells)


def _filter_key(cell_filter: CellFilter) -> tuple[object, ...]:
    return (cell_filter.scope, cell_filter.mask.shape, cell_filter.mask.tobytes())


def _with_masks(compiled: CompiledQuery) -> CompiledQuery:
    """The branch with its WHERE clause as masks in its products (rows are then bounded unfiltered)."""
    if not compiled.row_filters:
        return compiled
    return dataclasses.replace(
        compiled,
        domain=compiled.statement_workload.domain if compiled.statement_workload is not None else compiled.domain,
        workload=compiled.statement_workload,
        counts=statement_counts(compiled),
        row_filters=(),
    )


def _union_domain(compiled: list[CompiledQuery]) -> Domain:
    sizes: dict[str, int] = {}
    ordered: set[str] = set()
    for query in compiled:
        for attribute, size in zip(query.domain.attributes, query.domain.sizes):
            sizes.setdefault(attribute, size)
        ordered |= query.domain.ordered
    return Domain(sizes, ordered=ordered)


def _rows_in_order_of(values: np.ndarray, own: Product, merged: Product) -> np.ndarray:
    """A merged product's answers in the row order of the branch's own product: the merged domain may
    order attributes differently (``GROUP BY race, sex`` after ``GROUP BY sex, race``), and a product's
    rows follow the Kronecker order of its factors, which the domain sorts."""
    if own.factors == merged.factors:
        return np.asarray(values)
    order = [merged.factors.index(factor) for factor in own.factors]
    return np.asarray(values).reshape(merged.row_shape).transpose(order).reshape(-1)
