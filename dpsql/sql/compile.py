"""A checked :class:`~dpsql.sql.parse.Query` + the table's :class:`~dpsql.schema.Schema` → a
:class:`planner.Workload`, and the map from workload rows back to result rows.

The domain of a statement holds the columns its workload reads: the GROUP BY columns (in GROUP BY
order) and then the other columns of WHERE and of ``COUNT(nullable column)``. Each distinct COUNT
of the SELECT list is one workload product:

* a GROUP BY column is an ``Identity`` factor;
* the WHERE clause is split into its top-level AND-ed conjuncts, and conjuncts that share columns
  are joined into components; a component becomes one ``Predicate`` factor over its columns (a mask
  over their joint public domain, evaluated with SQL's three-valued logic: a NULL cell never
  satisfies a comparison), or, when it also mentions GROUP BY columns, one ``Explicit`` factor with
  a row per group cell (rows that select nothing are dropped: those cells are exact zeros);
* ``COUNT(c)`` for a nullable ``c`` adds the conjunct ``c IS NOT NULL``;
* a derived GROUP BY column (``CASE``, arithmetic or a date part over one column, see
  :mod:`dpsql.sql.derived`) is an attribute of its own, whose cells are its values, with an ``Identity``
  factor: the planner measures its few cells, not the cells of its source. Its public map from the
  source's declared cells (:attr:`CompiledQuery.derived`) lets the engine read counts over the source
  and sum them into the derived cells before any noise (``dpsql.workloads``).
* ``COUNT(DISTINCT <privacy unit>)`` is a ``COUNT(*)`` product: the engine counts the statement's
  (unit, group cell) pairs instead of its rows (:mod:`dpsql.sql.distinct_units`);
* ``SUM``/``AVG``/``VARIANCE``/``STDDEV`` of a bounded column add a factor over its moment cells
  (``dpsql.sql.moments``), the last attribute of the domain: one product per column, shared by its
  aggregates. Answers of a statement whose batch aggregates a column are in units of ``1/scale`` row.
* a quantile (MEDIAN, PERCENTILE_CONT/DISC, QUANTILE, MIN, MAX) of a column with an ordered domain adds
  a ``Prefix`` factor over that column (``dpsql.sql.quantiles``), placed after the GROUP BY columns: one
  product per column, its CDF per group, shared by every quantile of the column.

Predicates are evaluated against the schema's domains only, never against the data. The WHERE
masks are also handed to the backend (:attr:`CompiledQuery.row_filters`), which applies them to the
table's bounded rows (the same rows for every statement, :mod:`dpsql.sql.bounded_rows`), and the
workload's masks leave those counts unchanged.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dpsql.columns import label_array
from dpsql.errors import DataError, NotSupportedError, ProgrammingError
from dpsql.schema import ColumnDomain, Schema
from dpsql.sql.derived import CaseWhen, Derived, DerivedMap, derived_map
from dpsql.sql import kinds
from dpsql.sql.moments import ValueEncoding, resolve
from dpsql.sql.parse import (
    And,
    Between,
    Comparison,
    GroupKey,
    InList,
    IsNull,
    Not,
    Or,
    Predicate,
    Query,
    SelectItem,
    predicate_columns,
)
from planner import Domain, Explicit, Factor, Identity, Product, Workload
from planner import Predicate as PredicateBlock

MAX_PREDICATE_CELLS = 1 << 20  # largest joint domain a coupled WHERE component may span
MAX_RELEASED_CELLS = 1 << 26  # answers (product rows: CDF cells included) one statement or batch may release
MAX_RELEASED_ROWS = 1 << 25
"""Most GROUP BY cells one statement or batch may release, over all its grouping sets: every cell is a
returned row, held in memory as columns (about 95 bytes per cell at the peak of a release, the answers' 19
and the engine's aggregation included: Adult's 364 three-way marginals, 20.9 million cells, in 2.1 GB,
``benchmarks/wide_batch.py``; an 11-column CUBE of Adult would be 6.4·10¹¹ rows)."""

FALSE, UNKNOWN, TRUE = 0, 1, 2  # Kleene truth values (SQL three-valued logic)


@dataclass(frozen=True)
class ProductRows:
    """Workload product ``index`` answers the group cells ``keys[r]`` (one row of cell indices per
    product row, columns in GROUP BY order); group cells it does not list are exact zeros.
    ``in_cell_order``: its rows are every GROUP BY cell in C order (row r is cell r), so its answers need no
    mapping onto the cells."""

    index: int
    keys: np.ndarray
    in_cell_order: bool = False


@dataclass(frozen=True, eq=False)
class DerivedAttribute:
    """A derived GROUP BY column as an attribute of the workload: the column it is computed from and
    the public map of that column's cells to its own."""

    source: str
    map: DerivedMap


@dataclass(frozen=True)
class CompiledQuery:
    """A statement ready to run.

    ``statement_workload`` holds the statement's linear queries over the public domain of every column
    it mentions, WHERE included as masks (what EXPLAIN shows and what batch planning combines).
    The engine runs it in its cheaper equivalent form: the WHERE masks go into the bounded SQL as
    ``row_filters`` (rows they exclude are dropped from the bounded rows), and ``workload`` measures the
    GROUP BY cells of the remaining rows over ``domain`` (group columns, plus nullable COUNT columns).
    Group cells no row can reach under the WHERE clause are ``structural_zeros``: released as exact 0.
    """

    query: Query
    domain: Domain
    columns: dict[str, ColumnDomain]  # every column the statement mentions (schema spelling)
    workload: Workload | None  # None when every COUNT is zero by construction (nothing to measure)
    counts: tuple[ProductRows | None, ...]  # per SELECT item: its product, None for group keys / zero counts
    contributions: int
    row_filters: tuple[CellFilter, ...]
    statement_workload: Workload | None
    structural_zeros: np.ndarray  # bool over the GROUP BY cells (shape = group_shape)
    derived: dict[str, DerivedAttribute] = dataclasses.field(default_factory=dict)  # by GROUP BY key
    encoding: ValueEncoding | None = None  # the batch's aggregated column (its answers are scaled)
    unreleased: np.ndarray | None = None  # bool over the GROUP BY cells: key tuples a joint selection did not release (never shown)

    @property
    def scale(self) -> int:
        """Units of weight per row in this statement's answers (1 without aggregates in the batch)."""
        return 1 if self.encoding is None else self.encoding.scale

    @property
    def group_columns(self) -> tuple[str, ...]:
        return self.query.group_by

    def group_domain(self, name: str) -> ColumnDomain:
        """The domain a GROUP BY entry's rows show: its column's, or a derived column's values."""
        return self.derived[name].map.domain if name in self.derived else self.columns[name]

    @functools.cached_property
    def group_shape(self) -> tuple[int, ...]:
        return tuple(self.group_domain(c).size for c in self.query.group_by)

    @functools.cached_property
    def group_cells(self) -> int:
        return math.prod(self.group_shape)

    @functools.cached_property
    def key_cells(self) -> tuple[np.ndarray, ...]:
        """Each GROUP BY column's cell index of every GROUP BY cell (C order), in the narrowest integer type that
        holds it (a batch may show tens of millions of cells: a byte per key, not eight); read-only, computed once."""
        shape = self.group_shape
        cells = []
        for axis, size in enumerate(shape):
            along = np.arange(size, dtype=np.min_scalar_type(max(size - 1, 0))).reshape([size if a == axis else 1 for a in range(len(shape))])
            column = np.broadcast_to(along, shape).ravel()  # a contiguous copy in the narrow type
            column.setflags(write=False)
            cells.append(column)
        return tuple(cells)

    @functools.cached_property
    def key_labels(self) -> tuple[np.ndarray, ...]:
        """Each GROUP BY column's cell labels as an object array (:func:`dpsql.columns.label_array`), computed once."""
        return tuple(label_array(self.group_domain(c).labels()) for c in self.group_columns)

    @functools.cached_property
    def listed_cells(self) -> np.ndarray:
        """The GROUP BY cells a result may show, before the WHERE clause's exact zeros are taken out: all
        but a key set's remainder and the key tuples a joint selection did not release (read-only)."""
        listed = np.ones(self.group_cells, dtype=bool)
        for position, column in enumerate(self.group_columns):
            hidden = self.group_domain(column).hidden_cells
            if hidden:
                listed &= ~np.isin(self.key_cells[position], hidden)
        if self.unreleased is not None:
            listed &= ~self.unreleased.ravel()
        listed.setflags(write=False)
        return listed

    def describe(self) -> str:
        lines = [f"table {self.query.table}: {self.contributions} row(s) per privacy unit after bounding"]
        for name, column in self.columns.items():
            lines.append(f"  {name}: {column.describe()}")
        if self.workload is None or self.statement_workload is None:
            lines.append("every count is zero by construction: no data is read and nothing is charged")
            return "\n".join(lines)
        lines.append(
            f"statement workload: {len(self.statement_workload.products)} product(s), "
            f"{self.statement_workload.query_count} queries over {list(self.statement_workload.domain.attributes)}"
        )
        if self.row_filters:
            scopes = ", ".join("(" + ", ".join(f.scope) + ")" for f in self.row_filters)
            lines.append(f"WHERE applied in SQL to the bounded rows, as cell masks over {scopes}")
        lines.append(
            f"measured: {self.workload.query_count} queries over {list(self.domain.attributes) or '(total)'}, "
            f"{int(self.structural_zeros.sum())} group cell(s) exactly zero by the WHERE clause"
        )
        return "\n".join(lines)


def compile_query(
    query: Query, schema: Schema, table_columns: Sequence[str], encoding: ValueEncoding | None = None, rows_left: float = MAX_RELEASED_ROWS
) -> CompiledQuery:
    """Compile a checked query against the schema and the table's actual column names; ``encoding`` is
    the moment cells of the batch's aggregated column (``dpsql.sql.moments.encoding_for``); ``rows_left``
    the GROUP BY cells the batch may still release (:data:`MAX_RELEASED_ROWS`)."""
    resolver = _Resolver(query, schema, table_columns)
    query = resolver.resolved_query()
    columns = resolver.columns
    derived = _derived_attributes(query, columns)
    cells = {**columns, **{name: d.map.domain for name, d in derived.items()}}  # every attribute's domain
    group = query.group_by
    _check_released_rows(group, cells, rows_left)
    ranked = tuple(dict.fromkeys(c for i in query.select if (k := kinds.item_kind(i)) and (c := k.ranked(i)) is not None))  # after the GROUP BY columns
    counted = [c for c in columns if c not in group and c not in ranked and _counts_nulls(c, query, columns)]
    where_only = [c for c in columns if c not in group and c not in counted and c not in ranked and _in_where(c, query)]
    where_conjuncts = _conjuncts(query.where) if query.where is not None else []
    value = _value(query, encoding)
    statement_domain = _domain(cells, (*group, *ranked, *counted, *where_only), value)
    statement_workload, statement_counts = _workload(statement_domain, cells, query, where_conjuncts, value=value)
    filters = _cell_filters(statement_domain, columns, where_conjuncts)
    domain = _domain(cells, (*group, *ranked, *counted), value)
    zero = {_item_key(i) for i, c in zip(query.select, statement_counts) if kinds.measured(i) and c is None}
    workload, counts = _workload(domain, cells, query, [], zero, value)
    if statement_workload is None:
        workload, counts = None, tuple(None for _ in counts)
    return CompiledQuery(
        query=query,
        domain=domain,
        columns=columns,
        workload=workload,
        counts=counts,
        contributions=schema.contributions,
        row_filters=tuple(f for f in filters if not f.mask.all()),
        statement_workload=statement_workload,
        structural_zeros=_structural_zeros(filters, group, cells, derived),
        derived=derived,
        encoding=encoding,
    )


def _derived_attributes(query: Query, columns: dict[str, ColumnDomain]) -> dict[str, DerivedAttribute]:
    """Each derived GROUP BY column with its public map, computed from its source's declared domain."""
    found = {}
    for derived in query.derived:
        source = derived.source
        mapped = derived_map(derived, columns[source], lambda p, s=source: _truth(p, (s,), columns))
        found[derived.key] = DerivedAttribute(source, mapped)
    return found


def _domain(columns: dict[str, ColumnDomain], names: Sequence[str], value: ValueEncoding | None = None) -> Domain:
    """The columns' cells, then (last) the moment cells of an aggregated column."""
    sizes = {n: columns[n].size for n in names}
    if value is not None:
        sizes[value.attribute] = value.cells
    return Domain(sizes, ordered=[n for n in names if columns[n].is_ordered])


def _value(query: Query, encoding: ValueEncoding | None) -> ValueEncoding | None:
    """The batch's aggregated value when some item of the query reads its moment cells, else None."""
    return encoding if any((k := kinds.item_kind(i)) is not None and k.VALUES for i in query.select) else None


def _item_key(item: SelectItem) -> object:
    """Items sharing a product, as their kind says (COUNTs of the same column; every aggregate of the column: one
    moment block; every quantile of the column: one CDF)."""
    kind = kinds.item_kind(item)
    assert kind is not None
    return (kind.NAME, kind.product_key(item))


def _workload(
    domain: Domain,
    columns: dict[str, ColumnDomain],
    query: Query,
    where_conjuncts: list[Predicate],
    zero: set[object] = frozenset(),  # type: ignore[assignment]
    value: ValueEncoding | None = None,
) -> tuple[Workload | None, tuple[ProductRows | None, ...]]:
    """One product per distinct COUNT of the SELECT list, one for the aggregates of ``value``'s column and
    one per quantiled column (None where the count is zero by construction, or its key is in ``zero``)."""
    products: list[Product] = []
    counts: list[ProductRows | None] = []
    built: dict[object, ProductRows | None] = {}
    for item in query.select:
        kind = kinds.item_kind(item)
        if kind is None:  # a group key
            counts.append(None)
            continue
        key = _item_key(item)
        if key in zero:
            counts.append(None)
            continue
        if key not in built:
            extra, conditions = kind.block(item, columns, value)
            made = _product(domain, columns, query.group_by, [*where_conjuncts, *conditions], extra)
            if made is None:
                built[key] = None
            else:
                product, keys = made
                built[key] = ProductRows(len(products), keys, _in_cell_order(product, query.group_by))
                products.append(product)
        counts.append(built[key])
    return (Workload(domain, tuple(products)) if products else None), tuple(counts)


def _structural_zeros(
    filters: list[CellFilter], group: tuple[str, ...], columns: dict[str, ColumnDomain], derived: dict[str, DerivedAttribute]
) -> np.ndarray:
    """GROUP BY cells that no row passing the WHERE masks can fall in (a derived column's cells that no
    allowed cell of its source maps to included; every cell when a mask over other columns passes no row).
    The masks cover disjoint sets of columns, so a cell is reachable exactly when each mask allows it."""
    shape = tuple(columns[c].size for c in group)
    reachable = np.ones(shape, dtype=bool)
    for cell_filter in filters:
        keyed_axes = [i for i, c in enumerate(cell_filter.scope) if c in group]
        if not keyed_axes:
            reachable &= bool(cell_filter.mask.any())
            continue
        other_axes = tuple(i for i in range(len(cell_filter.scope)) if i not in keyed_axes)
        allowed = cell_filter.mask.any(axis=other_axes) if other_axes else cell_filter.mask
        keyed = [cell_filter.scope[i] for i in keyed_axes]  # in GROUP BY order (domain order)
        broadcast = [columns[c].size if c in keyed else 1 for c in group]
        reachable &= allowed.reshape(broadcast)
    for name, attribute in derived.items():
        for cell_filter in (f for f in filters if attribute.source in f.scope):
            axis = cell_filter.scope.index(attribute.source)
            others = tuple(i for i in range(len(cell_filter.scope)) if i != axis)
            sources = cell_filter.mask.any(axis=others) if others else cell_filter.mask
            allowed = np.zeros(attribute.map.domain.size, dtype=bool)
            allowed[attribute.map.cell_of[sources]] = True
            reachable &= allowed.reshape([allowed.size if c == name else 1 for c in group])
    return ~reachable


def _counts_nulls(column: str, query: Query, columns: dict[str, ColumnDomain]) -> bool:
    """Whether ``COUNT(column)`` needs the column's cells: it is nullable, or a key set whose remainder
    (rows of keys not released) ``COUNT(column)`` leaves out."""
    domain = columns[column]
    needs_cells = domain.nullable or domain.kind == "keys"
    return needs_cells and column in kinds.counted_columns(query)


def _in_where(column: str, query: Query) -> bool:
    return query.where is not None and column in predicate_columns(query.where)


# ---------------------------------------------------------------------------------------------
# Name resolution and domain checks.
# ---------------------------------------------------------------------------------------------


def _domain_advice(domain: ColumnDomain) -> str:
    """What to declare so a column can be grouped, filtered and ranked: a bounds-only column already names its range."""
    if domain.bounds is not None and not any(domain.auto_ends):
        low, high = (f"{end:g}" for end in domain.bounds)
        return (
            f"its bounds [{low}, {high}] serve SUM/AVG/VARIANCE/STDDEV only; declare range: [{low}, {high}] (integers) "
            "or bins to filter, group and rank it over declared cells"
        )
    return (
        "declare its categories, range or bins, or first GROUP BY it in a statement of its own, which selects its keys "
        "privately (later statements then use the released keys in WHERE and COUNT too)"
    )


class _Resolver:
    """Maps the names a statement uses onto the table's columns and checks each has a domain."""

    def __init__(self, query: Query, schema: Schema, table_columns: Sequence[str]) -> None:
        self.query = query
        self.schema = schema
        self.table_columns = tuple(table_columns)
        self.columns: dict[str, ColumnDomain] = {}

    def name(self, name: str, clause: str) -> str:
        resolved = resolve(name, self.table_columns, self.query.table, clause)
        domain = self.schema.column(resolved)
        if not domain.is_known:
            raise NotSupportedError(f"{clause}: column {resolved!r} has no declared domain in the schema of {self.query.table!r}; {_domain_advice(domain)}")
        self.columns.setdefault(resolved, domain)
        return resolved

    def resolved_query(self) -> Query:
        q = self.query
        derived = tuple(self._derived(d) for d in q.derived)
        keys = {d.key for d in derived}
        group = tuple(dict.fromkeys(c if c in keys else self._group_column(c) for c in q.group_by))
        select = tuple(self._item(item, keys) for item in q.select)
        where = self._predicate(q.where) if q.where is not None else None
        return Query(q.table, select, group, where, derived)

    def _group_column(self, name: str) -> str:
        """A plain GROUP BY column; refused when its values are instants counted by their days (a cell is a day, not a
        value the column holds)."""
        resolved = self.name(name, "GROUP BY")
        if self.columns[resolved].is_timestamp_range:
            raise NotSupportedError(
                f"GROUP BY {name}: {resolved!r} is a TIMESTAMP column declared as a range of days, whose values are instants, "
                f"not days; group by the day, CAST({name} AS DATE), or a coarser part (date_trunc('month', {name}), "
                f"extract(year FROM {name}))"
            )
        return resolved

    def _derived(self, derived: Derived) -> Derived:
        source = self.name(derived.source, "GROUP BY")
        expression = derived.expression
        if isinstance(expression, CaseWhen):
            branches = tuple((self._predicate(p), value) for p, value in expression.branches)
            expression = CaseWhen(branches, expression.default)
        return Derived(derived.key, source, expression)

    def _item(self, item: SelectItem, derived_keys: set[str]) -> SelectItem:
        if isinstance(item, GroupKey):
            if item.column in derived_keys:
                return item
            column = self.name(item.column, "SELECT")
            # unaliased, a column is named as the table spells it (DuckDB's rule; PostgreSQL's for a name it accepts)
            return GroupKey(column if item.name == item.column else item.name, column)
        kind = kinds.item_kind(item)
        assert kind is not None
        return kind.resolve(item, self)

    def _predicate(self, predicate: Predicate) -> Predicate:
        if isinstance(predicate, (And, Or)):
            return type(predicate)(tuple(self._predicate(p) for p in predicate.operands))
        if isinstance(predicate, Not):
            return Not(self._predicate(predicate.operand))
        column = self.name(predicate.column, "WHERE")
        if isinstance(predicate, Comparison):
            return Comparison(column, predicate.operator, predicate.value)
        if isinstance(predicate, InList):
            return InList(column, predicate.values)
        if isinstance(predicate, Between):
            return Between(column, predicate.low, predicate.high)
        return IsNull(column)


# ---------------------------------------------------------------------------------------------
# Products.
# ---------------------------------------------------------------------------------------------


def _conjuncts(predicate: Predicate) -> list[Predicate]:
    if isinstance(predicate, And):
        return [c for operand in predicate.operands for c in _conjuncts(operand)]
    return [predicate]


def _components(conjuncts: list[Predicate]) -> list[list[Predicate]]:
    """Group conjuncts into connected components of shared columns."""
    components: list[tuple[set[str], list[Predicate]]] = []
    for conjunct in conjuncts:
        scope = set(predicate_columns(conjunct))
        merged_scope, merged = set(scope), [conjunct]
        for other_scope, others in [c for c in components if c[0] & scope]:
            components.remove((other_scope, others))
            merged_scope |= other_scope
            merged = others + merged
        components.append((merged_scope, merged))
    return [members for _, members in components]


@dataclass(frozen=True)
class CellFilter:
    """Rows whose cells over ``scope`` (domain order) fall where ``mask`` is True."""

    scope: tuple[str, ...]
    mask: np.ndarray


def _cell_filters(domain: Domain, columns: dict[str, ColumnDomain], conjuncts: list[Predicate]) -> list[CellFilter]:
    """One mask per connected component of the conjuncts, evaluated over the public domains."""
    filters = []
    for component in _components(conjuncts):
        scope = domain.canonical(c for p in component for c in predicate_columns(p))
        shape = domain.shape(scope)
        if math.prod(shape) > MAX_PREDICATE_CELLS:
            raise NotSupportedError(
                f"WHERE: the condition couples columns {list(scope)} whose joint domain has {math.prod(shape)} cells "
                f"(limit {MAX_PREDICATE_CELLS}); combine conditions on different columns with AND"
            )
        mask = np.full(shape, True)
        for conjunct in component:
            mask &= _truth(conjunct, scope, columns) == TRUE
        filters.append(CellFilter(scope, mask))
    return filters


def released_rows(query: CompiledQuery) -> int:
    """The GROUP BY cells (returned rows) of a compiled query."""
    return math.prod(query.domain.shape(query.group_columns))


def _check_released_rows(group: tuple[str, ...], cells: dict[str, ColumnDomain], rows_left: float) -> None:
    """Refuse, from the declared domains alone, a grouping set with more cells than may be released."""
    rows = math.prod(cells[name].size for name in group)
    if rows > rows_left:
        alone = rows_left == MAX_RELEASED_ROWS
        raise NotSupportedError(
            f"GROUP BY ({', '.join(group)}) has {rows:,} cells{'' if alone else ' beside the other grouping sets'}: "
            f"dpsql returns at most {MAX_RELEASED_ROWS:,} rows per statement or batch; group by fewer or coarser columns"
        )


def _product(
    domain: Domain, columns: dict[str, ColumnDomain], group: tuple[str, ...], conjuncts: list[Predicate], extra: Factor | None = None
) -> tuple[Product, np.ndarray] | None:
    """The product for one COUNT (or, with ``extra``, one column's aggregates or quantiles: a factor over
    its moment cells or its CDF), with the GROUP BY cell keys of its rows; None if it is all zeros."""
    filters = _cell_filters(domain, columns, conjuncts)
    if extra is not None:  # a quantiled column the WHERE masks too
        extra, filters = _masked_cdf(extra, filters)
    factors: list[Factor] = [] if extra is None else [extra]
    key_maps: list[dict[str, np.ndarray]] = [] if extra is None else [{}]
    covered: set[str] = set()
    for cell_filter in filters:
        scope, mask = cell_filter.scope, cell_filter.mask
        keyed = tuple(c for c in scope if c in group)
        if not mask.any():
            return None
        if not keyed:
            if not mask.all():
                factors.append(Factor(scope, PredicateBlock(mask.ravel())))
                key_maps.append({})
            continue
        block, keys = _keyed_block(mask, scope, keyed)
        factors.append(Factor(scope, block))
        key_maps.append(keys)
        covered |= set(keyed)
    for name in group:
        if name not in covered:
            factors.append(Factor((name,), Identity(columns[name].size)))
            key_maps.append({name: np.arange(columns[name].size)})
    product = Product(domain, tuple(factors))
    if product.rows > MAX_RELEASED_CELLS:
        raise NotSupportedError(too_many_cells("release", product.rows, MAX_RELEASED_CELLS))
    return product, _row_keys(product, factors, key_maps, group)


def _in_cell_order(product: Product, group: tuple[str, ...]) -> bool:
    """Whether the product's rows are the GROUP BY cells in C order: one whole (identity) factor per GROUP BY
    column, in GROUP BY order (:func:`_row_keys` then gives row r the keys of cell r)."""
    return tuple(f.attributes for f in product.factors) == tuple((name,) for name in group) and all(
        isinstance(f.block, Identity) for f in product.factors
    )


def too_many_cells(what: str, cells: int, limit: int) -> str:
    return (
        f"the statement would {what} {cells:,} cells (at most {limit:,} fit in memory): group by fewer or coarser "
        "columns, declare coarser bins, or split the batch"
    )


def _masked_cdf(cdf: Factor, filters: list[CellFilter]) -> tuple[Factor, list[CellFilter]]:
    """The CDF factor with the WHERE mask over its own column folded in (the cumulative counts of the
    rows that pass), and the other filters. A condition coupling the column with others is refused."""
    column = cdf.attributes[0]
    matrix = None
    rest = []
    for cell_filter in filters:
        if column not in cell_filter.scope:
            rest.append(cell_filter)
            continue
        if cell_filter.scope != (column,):
            raise NotSupportedError(
                f"WHERE: a condition joining {column!r} with other columns by OR cannot be combined with a quantile of "
                f"{column!r} in this statement or batch; AND the conditions on {column!r} alone, or run it as a statement of its own"
            )
        matrix = (cdf.block.matrix() if matrix is None else matrix) * cell_filter.mask.reshape(1, -1)
    return (cdf if matrix is None else Factor(cdf.attributes, Explicit(matrix))), rest


def _keyed_block(
    mask: np.ndarray, scope: tuple[str, ...], keyed: tuple[str, ...]
) -> tuple[Explicit, dict[str, np.ndarray]]:
    """One row per cell of the keyed (GROUP BY) columns of ``scope``, selecting the masked cells."""
    axes = [scope.index(c) for c in keyed]
    cells = np.indices(mask.shape).reshape(len(scope), -1)
    key_shape = tuple(mask.shape[a] for a in axes)
    row_of_cell = np.ravel_multi_index(tuple(cells[a] for a in axes), key_shape)
    matrix = np.zeros((math.prod(key_shape), mask.size))
    selected = mask.ravel()
    matrix[row_of_cell[selected], np.flatnonzero(selected)] = 1.0
    kept_rows = np.flatnonzero(matrix.any(axis=1))
    key_cells = np.unravel_index(kept_rows, key_shape)
    return Explicit(matrix[kept_rows]), {name: key_cells[i] for i, name in enumerate(keyed)}


def _row_keys(
    product: Product, factors: list[Factor], key_maps: list[dict[str, np.ndarray]], group: tuple[str, ...]
) -> np.ndarray:
    """GROUP BY cell indices of every product row (Kronecker order of the product's factors), in the
    narrowest integer type that holds them (a batch may have tens of millions of rows)."""
    key_of = {f.attributes: keys for f, keys in zip(factors, key_maps)}
    ordered = [(f, key_of[f.attributes]) for f in product.factors]
    combos = np.indices(product.row_shape, dtype=np.int32).reshape(len(ordered), -1) if ordered else np.zeros((0, 1), np.int32)
    widest = max((product.domain.size_of(name) for name in group), default=1)
    keys = np.zeros((combos.shape[1], len(group)), dtype=np.min_scalar_type(widest))
    for position, (_, key_map) in enumerate(ordered):
        for name, cells in key_map.items():
            keys[:, group.index(name)] = cells[combos[position]]
    return keys


# ---------------------------------------------------------------------------------------------
# Predicate evaluation over public domains (Kleene logic: FALSE < UNKNOWN < TRUE).
# ---------------------------------------------------------------------------------------------


def _truth(predicate: Predicate, scope: tuple[str, ...], columns: dict[str, ColumnDomain]) -> np.ndarray:
    if isinstance(predicate, (And, Or)):
        return _junction_truth(predicate, scope, columns)
    if isinstance(predicate, Not):
        operand = predicate.operand
        if isinstance(operand, IsNull) and _never_null(columns[operand.column]):  # BI tools add IS NOT NULL to every filter
            column = columns[operand.column]
            return _broadcast(np.full(column.size, TRUE, dtype=np.int8), column, scope, columns)
        return TRUE - _truth(operand, scope, columns)
    column = columns[predicate.column]
    return _broadcast(_atom_truth(predicate, column), column, scope, columns)


def _never_null(column: ColumnDomain) -> bool:
    """A declared column that is not nullable: rows with NULL in it are dropped before counting
    (:data:`dpsql.schema.OUT_OF_DOMAIN_RULE`), so ``IS NOT NULL`` holds for every row counted."""
    return not column.nullable and column.kind != "keys"


def _broadcast(values: np.ndarray, column: ColumnDomain, scope: tuple[str, ...], columns: dict[str, ColumnDomain]) -> np.ndarray:
    """A truth vector over one column's cells as a (read-only) array over ``scope``."""
    shape = [1] * len(scope)
    shape[scope.index(column.name)] = column.size
    return np.broadcast_to(values.reshape(shape), tuple(columns[c].size for c in scope))


def _junction_truth(predicate: And | Or, scope: tuple[str, ...], columns: dict[str, ColumnDomain]) -> np.ndarray:
    """AND (minimum) or OR (maximum) of the operands, folded one at a time (the memory of one mask, not of
    all). Atoms on one column are combined over that column's cells first, and the ``=``/``IN`` atoms of an
    OR (``<>`` of an AND) by one lookup of all their literals: an OR chain of k values over n cells costs
    O(k + n), not O(k·n) — or O(k · the whole scope)."""
    combine = np.minimum if isinstance(predicate, And) else np.maximum
    atoms: dict[str, list[Predicate]] = {}
    parts: list[np.ndarray] = []
    for operand in predicate.operands:
        if isinstance(operand, (Comparison, InList, Between, IsNull)):
            atoms.setdefault(operand.column, []).append(operand)
        else:
            parts.append(_truth(operand, scope, columns))
    for name, group in atoms.items():
        column = columns[name]
        merges = [_lookup_merges(a, column, isinstance(predicate, Or)) for a in group]
        merged = [a for a, m in zip(group, merges) if m]
        rest = [_atom_truth(a, column) for a, m in zip(group, merges) if not m]
        if merged:
            rest.append(_merged_lookup_truth(merged, column, isinstance(predicate, Or)))
        vector = rest[0].copy()
        for other in rest[1:]:
            combine(vector, other, out=vector)
        parts.append(_broadcast(vector, column, scope, columns))
    truth = np.array(parts[0])
    for part in parts[1:]:
        combine(truth, part, out=truth)
    return truth


def _lookup_merges(atom: Predicate, column: ColumnDomain, disjunction: bool) -> bool:
    """``=``/``IN`` under OR and ``<>`` under AND on a column of listed values: merged into one lookup."""
    if column.kind == "bins" or column.is_timestamp_range:
        return False
    if disjunction:
        return isinstance(atom, InList) or (isinstance(atom, Comparison) and atom.operator == "=")
    return isinstance(atom, Comparison) and atom.operator == "<>"


def _merged_lookup_truth(atoms: list[Predicate], column: ColumnDomain, disjunction: bool) -> np.ndarray:
    """The OR of ``=``/``IN`` atoms (or the AND of ``<>`` atoms) on one column, as :func:`_atom_truth` gives
    each and the junction combines them: value cells TRUE/FALSE, the NULL and remainder cells UNKNOWN."""
    listed = np.zeros(column.value_cells, dtype=bool)
    for atom in atoms:
        listed |= _listed_cells(atom, column)
    truth = np.full(column.size, UNKNOWN, dtype=np.int8)
    truth[: column.value_cells] = np.where(listed if disjunction else ~listed, TRUE, FALSE)
    return truth


def _listed_cells(atom: InList | Comparison, column: ColumnDomain) -> np.ndarray:
    """The cells an ``=``/``<>``/``IN`` atom names (each literal checked to lie in the domain)."""
    literals = atom.values if isinstance(atom, InList) else (atom.value,)
    clause = f"WHERE {column.name} IN" if isinstance(atom, InList) else f"WHERE {column.name} {atom.operator}"
    index = column.cell_of_value
    listed = np.zeros(column.value_cells, dtype=bool)
    listed[[index[_checked_literal(v, column, clause, True)] for v in literals]] = True
    return listed


def _atom_truth(atom: Predicate, column: ColumnDomain) -> np.ndarray:
    """Truth value of one atomic condition on every cell of ``column``."""
    truth = np.full(column.size, UNKNOWN, dtype=np.int8)  # a key set's remainder stays UNKNOWN: its values are not known
    if isinstance(atom, IsNull):
        if column.kind == "keys":
            truth[: column.value_cells] = FALSE
            if column.nullable:
                truth[column.null_cell] = TRUE
            return truth
        if not column.nullable:
            raise ProgrammingError(
                f"WHERE {column.name} IS NULL: column {column.name!r} is not nullable, so rows with NULL are "
                f"dropped before counting (IS NOT NULL holds for every row counted); declare 'nullable: true' in the schema to count NULLs"
            )
        truth[:] = FALSE
        truth[column.null_cell] = TRUE
        return truth
    if column.kind == "bins":
        truth[: column.value_cells] = _bin_truth(atom, column)
    elif column.is_timestamp_range:
        truth[: column.value_cells] = _day_truth(atom, column)
    else:
        truth[: column.value_cells] = _value_truth(atom, column)
    return truth


def _value_truth(atom: Predicate, column: ColumnDomain) -> np.ndarray:
    """TRUE or FALSE of ``atom`` for each declared value of ``column`` (not bins); UNKNOWN for a released key
    that cannot be compared with the literal (a DATE key ``'infinity'`` shown as text, against a date), like
    a comparison with NULL. Each literal is checked once; ``=`` and ``IN`` find their cells by lookup, so an
    IN list of k values over n cells costs O(n + k), not O(n·k)."""
    cells = column.labels()[: column.value_cells]
    if isinstance(atom, InList) or (isinstance(atom, Comparison) and atom.operator in ("=", "<>")):
        listed = _listed_cells(atom, column)
        return np.where(~listed if isinstance(atom, Comparison) and atom.operator == "<>" else listed, TRUE, FALSE).astype(np.int8)
    numbers = _range_numbers(column)
    if isinstance(atom, Comparison):
        value = _checked_literal(atom.value, column, f"WHERE {column.name} {atom.operator}", False)
        if numbers is not None and _exact_number(value):
            return np.where(_COMPARED[atom.operator](numbers, value), TRUE, FALSE).astype(np.int8)
        return _each(cells, lambda cell: _compare(cell, atom.operator, value))
    assert isinstance(atom, Between)
    low = _checked_literal(atom.low, column, f"WHERE {column.name} BETWEEN", False)
    high = _checked_literal(atom.high, column, f"WHERE {column.name} BETWEEN", False)
    if numbers is not None and _exact_number(low) and _exact_number(high):
        return np.where((numbers >= low) & (numbers <= high), TRUE, FALSE).astype(np.int8)
    return _each(cells, lambda cell: low <= cell <= high)  # type: ignore[operator]


def _each(cells: Sequence[object], holds: Callable[[object], bool]) -> np.ndarray:
    """Kleene truth of ``holds`` on each cell: a comparison the cell's type does not support is UNKNOWN."""

    def truth(cell: object) -> int:
        try:
            return TRUE if holds(cell) else FALSE
        except TypeError:
            return UNKNOWN

    return np.fromiter((truth(cell) for cell in cells), dtype=np.int8, count=len(cells))


_COMPARED = {"=": np.equal, "<>": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}
EXACT_IN_DOUBLE = 2**53  # integers of at most this magnitude compare exactly against a float


def _range_numbers(column: ColumnDomain) -> np.ndarray | None:
    """A range of integers' declared values as an array (a comparison over 500,001 values is one numpy
    operation, not a Python loop), when each is exactly comparable with a float literal; else None."""
    if column.kind != "range" or column.is_date_range:
        return None
    low = int(column.values[0])  # type: ignore[call-overload]
    if max(abs(low), abs(low + column.value_cells)) > EXACT_IN_DOUBLE:
        return None
    return low + np.arange(column.value_cells, dtype=np.int64)


def _exact_number(value: object) -> bool:
    return type(value) is int and abs(value) <= EXACT_IN_DOUBLE or type(value) is float and math.isfinite(value)


def _compare(cell: object, operator: str, value: object) -> bool:
    if operator == "=":
        return cell == value
    if operator == "<>":
        return cell != value
    if operator == "<":
        return cell < value  # type: ignore[operator]
    if operator == "<=":
        return cell <= value  # type: ignore[operator]
    if operator == ">":
        return cell > value  # type: ignore[operator]
    return cell >= value  # type: ignore[operator]


def _checked_literal(value: object, column: ColumnDomain, clause: str, must_be_in_domain: bool) -> object:
    """The literal in the type of the column's domain values (an ISO string for a date, 0/1 for a
    boolean, a number for a text column declared with numbers), after checking that it has that type
    (and, for = / IN, that it is a value of the domain)."""
    declared = column.values if column.kind == "bins" else column.labels()[: column.value_cells]
    coerced = _coerced(value, declared[0]) if declared else value
    if column.kind == "keys" and (coerced is _MISMATCH or coerced not in declared) and value in declared:
        coerced = value  # a released key shown as text in a typed column (a DATE 'infinity')
    if coerced is _MISMATCH:
        hint = ""
        if isinstance(value, str) and declared and isinstance(declared[0], (int, float)) and not isinstance(declared[0], bool):
            hint = "; write the number unquoted (a quoted number is read only when it casts exactly: '8' for 8, not '8.0' on an integer column)"
        raise DataError(
            f"{clause} {_shown(value)}: the literal's type does not match the domain of {column.name!r} ({column.describe()}){hint}"
        )
    if must_be_in_domain and coerced not in (column.cell_of_value if column.kind != "bins" else declared):
        released = "is not among the released keys" if column.kind == "keys" else "is outside the declared domain"
        raise DataError(
            f"{clause} {_shown(value)}: the value {released} of {column.name!r} ({column.describe()}); "
            f"rows with such values are not counted under it, so the condition could never match"
        )
    return coerced


_MISMATCH = object()


def _coerced(value: object, example: object) -> object:
    """``value`` (a SQL literal: str, int, float or bool) as the type of ``example`` (a domain value), or
    :data:`_MISMATCH`."""
    if isinstance(example, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"  # what DuckDB and PostgreSQL both cast the text to
        return bool(value) if isinstance(value, int) and value in (0, 1) else _MISMATCH
    if isinstance(example, (int, float, decimal.Decimal)):
        if isinstance(value, str):
            number = _number_text(value, integer=isinstance(example, int))
            return decimal.Decimal(value) if isinstance(example, decimal.Decimal) and number is not _MISMATCH else number
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else _MISMATCH
    if isinstance(example, (datetime.date, datetime.datetime)):
        if isinstance(value, datetime.date):  # a typed literal, DATE '…' or TIMESTAMP '…'
            return _typed_date(value, isinstance(example, datetime.datetime))
        if not isinstance(value, str):
            return _MISMATCH
        kind = datetime.datetime if isinstance(example, datetime.datetime) else datetime.date
        try:
            return kind.fromisoformat(value)
        except ValueError:
            return _MISMATCH
    if isinstance(example, str):
        if isinstance(value, str):
            return value
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else _MISMATCH
    return value if type(value) is type(example) else _MISMATCH


def _typed_date(value: datetime.date, timestamps: bool) -> object:
    """A DATE or TIMESTAMP literal compared with a column of timestamps (a date is its midnight, as the engine casts
    it) or of dates (a timestamp at midnight is its date; another instant is refused: compare a date with a date)."""
    if timestamps:
        return value if isinstance(value, datetime.datetime) else datetime.datetime(value.year, value.month, value.day)
    if not isinstance(value, datetime.datetime):
        return value
    return value.date() if value == datetime.datetime(value.year, value.month, value.day) else _MISMATCH


_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_DECIMAL_TEXT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _number_text(text: str, integer: bool) -> object:
    """A quoted number compared with a numeric column (``educ = '8'``): the number when the text casts to the
    same one in DuckDB and in PostgreSQL — digits for an integer column, a decimal numeral for another —
    else :data:`_MISMATCH` (``'8.0'`` or ``'8 '`` on an integer column: engines disagree, so it is refused)."""
    if integer:
        return int(text) if _INTEGER_TEXT.fullmatch(text) else _MISMATCH
    return float(text) if _DECIMAL_TEXT.fullmatch(text) else _MISMATCH


def _bin_truth(atom: Predicate, column: ColumnDomain) -> list[int]:
    """Per bin [lo, hi): TRUE or FALSE when the condition holds for all or none of its values."""
    edges = column.values
    clause = f"WHERE {column.name}"
    if isinstance(atom, Comparison) and atom.operator in ("<", "<=", ">", ">="):
        bounds = [_bin_bounds(atom.operator, atom.value, column, clause)]
    elif isinstance(atom, Between):
        bounds = [_bin_bounds(">=", atom.low, column, clause), _bin_bounds("<=", atom.high, column, clause)]
    else:
        raise NotSupportedError(
            f"{clause}: = , <> and IN cannot select values inside the bins of {column.name!r} "
            f"(edges {list(edges)}); compare with bin edges instead, e.g. {column.name} >= {edges[0]} AND "
            f"{column.name} < {edges[1]}"
        )
    results = []
    for lo, hi in zip(edges, edges[1:]):
        states = {check(lo, hi) for check in bounds}
        if None in states:
            raise NotSupportedError(
                f"{clause}: the condition splits a bin [{lo}, {hi}) of {column.name!r}; "
                f"use bin edges {list(edges)} as bounds (bins are left-closed: [lo, hi))"
            )
        results.append(TRUE if all(states) else FALSE)
    return results


def _day_truth(atom: Predicate, column: ColumnDomain) -> np.ndarray:
    """A range of days on a TIMESTAMP column: each cell holds the instants of one day, ``[midnight, next midnight)``
    — a bin of instants. A comparison is TRUE or FALSE on a day when it holds for all or none of them, and refused
    (before anything is read) when it splits one: comparisons with midnights by ``>=`` and ``<`` never do."""
    name = column.name
    if isinstance(atom, Comparison) and atom.operator in ("<", "<=", ">", ">="):
        bounds = [(atom.operator, atom.value, f"WHERE {name} {atom.operator} {_shown(atom.value)}")]
    elif isinstance(atom, Between):
        written = f"WHERE {name} BETWEEN {_shown(atom.low)} AND {_shown(atom.high)}"
        bounds = [(">=", atom.low, written), ("<=", atom.high, written)]
    else:
        literal = atom.values[0] if isinstance(atom, InList) else atom.value  # type: ignore[union-attr]
        written = f"IN ({_shown(literal)}, ...)" if isinstance(atom, InList) else f"{atom.operator} {_shown(literal)}"  # type: ignore[union-attr]
        day = _instant(literal, column, f"WHERE {name}").date()
        raise NotSupportedError(
            f"WHERE {name} {written}: {name!r} is a TIMESTAMP column declared as a range of days, and =, <> and IN select single "
            f"instants of a day; select whole days by midnights, e.g. {name} >= '{day}' AND {name} < '{_next_day(day)}'"
        )
    starts = np.datetime64(column.values[0], "us") + np.arange(column.value_cells) * np.timedelta64(1, "D")
    truth = np.full(column.value_cells, True)
    for operator, value, written in bounds:
        instant = _instant(value, column, f"WHERE {name} {operator}")
        every, none = _on_days(operator, np.datetime64(instant, "us"), starts)
        if not (every | none).all():
            raise NotSupportedError(f"{written}: {_day_split(name, operator, instant)}")
        truth &= every
    return np.where(truth, TRUE, FALSE).astype(np.int8)


def _instant(value: object, column: ColumnDomain, clause: str) -> datetime.datetime:
    """A literal compared with a range of days on a TIMESTAMP column, as the instant the engine compares (a date is its
    midnight); one with a time zone is refused (the column's values have none)."""
    instant = _checked_literal(value, column, clause, False)
    assert isinstance(instant, datetime.datetime)
    if instant.tzinfo is not None:
        raise NotSupportedError(f"{clause} {_shown(value)}: the column's timestamps have no time zone; write the literal's local time without an offset")
    return instant


def _on_days(operator: str, bound: np.datetime64, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per day (its first instant in ``starts``; it lasts until the next day's): whether ``instant <operator> bound``
    holds for every instant of the day, and whether it holds for none."""
    ends = starts + np.timedelta64(1, "D")
    if operator == "<":
        return ends <= bound, starts >= bound
    if operator == "<=":
        return ends <= bound, starts > bound
    if operator == ">=":
        return starts >= bound, ends <= bound
    return starts > bound, ends <= bound


def _next_day(day: datetime.date) -> str:
    """The ISO text of the day after ``day`` (10000-01-01 after the last day Python holds)."""
    return str(np.datetime64(day, "D") + np.timedelta64(1, "D"))


def _shown(value: object) -> str:
    """A WHERE literal as a message shows it: as written (``DATE '2024-06-01'`` for a typed literal)."""
    if isinstance(value, datetime.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, datetime.date):
        return f"DATE '{value.isoformat()}'"
    return repr(value)


def _day_split(name: str, operator: str, bound: datetime.datetime) -> str:
    """Why a comparison splits a day of a range of days on a TIMESTAMP column, and the comparison with a midnight to write."""
    day = bound.date()
    why = f"it splits the day {day} of {name!r}, a TIMESTAMP column declared as a range of days (each value counts in its day)"
    if operator in ("<", "<="):
        return f"{why}; compare with a midnight by <: {name} < '{_next_day(day)}' to count the day {day}, {name} < '{day}' to leave it out"
    return f"{why}; compare with a midnight by >=: {name} >= '{day}' to count the day {day}, {name} >= '{_next_day(day)}' to leave it out"


def _bin_bounds(operator: str, value: object, column: ColumnDomain, clause: str):  # noqa: ANN202
    """A function (lo, hi) → True/False/None (= holds for all/none/some values of the bin)."""
    bound = _checked_literal(value, column, f"{clause} {operator}", False)

    def check(lo: float, hi: float) -> bool | None:
        # values of a bin are the reals in [lo, hi)
        if operator == "<":
            return True if hi <= bound else False if lo >= bound else None  # type: ignore[operator]
        if operator == "<=":
            return True if hi <= bound else False if lo > bound else None  # type: ignore[operator]
        if operator == ">=":
            return True if lo >= bound else False if hi <= bound else None  # type: ignore[operator]
        return True if lo > bound else False if hi <= bound else None  # type: ignore[operator]

    return check


def statement_counts(compiled: CompiledQuery) -> tuple[ProductRows | None, ...]:
    """Per SELECT item, its product in ``compiled.statement_workload`` (WHERE as masks): how batch
    planning (``dpsql.workloads``) maps a statement's rows when statements with different WHERE clauses
    share one measurement and so cannot filter rows in SQL."""
    if compiled.statement_workload is None:
        return tuple(None for _ in compiled.query.select)
    conjuncts = _conjuncts(compiled.query.where) if compiled.query.where is not None else []
    cells = {**compiled.columns, **{name: d.map.domain for name, d in compiled.derived.items()}}
    value = _value(compiled.query, compiled.encoding)
    return _workload(compiled.statement_workload.domain, cells, compiled.query, conjuncts, value=value)[1]
