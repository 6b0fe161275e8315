"""The one SQL statement a query sends to the backend: the marginals over the bounded rows.

Built as a sqlglot AST so any backend can transpile it to its dialect::

    SELECT c0, c1, [GROUPING(c0, c1) AS grouping_id,] COUNT(*) AS n
    FROM (
      SELECT c0, c1 FROM (SELECT <col0> AS c0, ..., <col2> AS c2 FROM <the bounded rows>)
      WHERE <WHERE clause>
    )
    GROUP BY [GROUPING SETS] (...)

With a privacy unit, *the bounded rows* are the table's rows that pass every declared column's domain
test, at most ``max_rows_per_unit`` per unit (:mod:`dpsql.sql.bounded_rows`): the same rows for every
statement, read from the table they were materialised in once (``bounded=True``, see
:mod:`dpsql.bounded_tables`) or computed by a subquery of the statement where the backend cannot keep
them. Without a privacy unit (one row = one unit) there is no bounding: the statement reads the table and
applies the domain tests itself.

Each mentioned column enters as its raw value when that suffices (categories and integer ranges:
the few distinct values of the result are mapped to cell numbers in numpy afterwards), or as its
cell number computed by a ``CASE`` (bins, and columns coupled with others in one WHERE mask). The
domain test drops rows whose value is NULL (in a column not declared nullable) or outside the declared
domain. The WHERE clause arrives as masks over public domains (:class:`~dpsql.sql.compile.CellFilter`):
a one-column mask becomes ``IN`` / ``BETWEEN`` / bin-edge tests on the raw value, a mask coupling
several columns an ``IN`` over the flat cell number. Both rules look at one row at a time (public,
data-independent). The WHERE clause applies to the bounded rows — after bounding, like a WHERE compiled
into the workload as a mask — so a unit's kept rows do not depend on the statement; a unit over the
bound may spend some of its kept rows outside the WHERE clause (docs/architecture.md, "Bounded rows").

**A column without a declared domain** (``keyed``: grouped by to select its keys, or by a key set
released earlier) is never tested and enters as its raw value. After the unit bound, each unit keeps
at most ``max_groups_per_unit`` keys (a random choice among its keys) and at most ``max_rows_per_group``
rows per kept key; its other rows are not dropped but flagged ``key_kept = 0`` — they form the
*remainder*, one cell of the column that holds every row whose key a unit could not contribute to or
that was not released. So every statement counts the same rows, whether or not it groups by such a
column, and a total over the column is a total over the table::

    DENSE_RANK() OVER (PARTITION BY unit ORDER BY HASH(HASH(unit, key, <salt>)), key) <= max_groups_per_unit
    ROW_NUMBER() OVER (PARTITION BY unit, key ORDER BY HASH(HASH(unit, key, row_key, <salt>))) <= max_rows_per_group

The aggregation then returns the count of every (key, ``key_kept``, other cells) combination, and
— when keys are being selected — ``COUNT(DISTINCT unit)`` per key; :meth:`BoundedAggregation.key_histogram`
reads it. Bounding and grouping use the engine's own equality on the raw value (one key per distinct SQL
value: NULL and NaN are keys of their own), but a key leaves the engine only as its **canonical text**,
``CAST(key AS TEXT)`` of the group's value: exact for HUGEINT, UBIGINT and DECIMAL (never merged through a
double), defined for NaN, ±infinity and dates Python cannot hold (``'infinity'``, years beyond 9999), so
reading keys cannot fail, and two keys the engine kept apart stay apart (``dpsql.keys`` turns the text
into the value shown, and keeps the text as the key's identity). Keys are never written into the SQL:
which of them are released is decided in Python.

**Distinct units** (``distinct``: ``COUNT(DISTINCT <privacy unit>)``, :mod:`dpsql.sql.distinct_units`): the
rows that pass the WHERE clause become their distinct (unit, group cell) pairs, at most
``max_groups_per_unit`` per unit by the salted order, and the marginals count those pairs.

**An aggregated column** (``value``: SUM/AVG/VARIANCE/STDDEV, ``dpsql.sql.moments``) enters as the
integer weights ``w0, w1, …`` its clamped, gridded value puts in each moment cell, computed from the row
alone; every grouping set then returns ``SUM(w0), SUM(w1), …`` beside ``COUNT(*)``. A marginal over the
moment cells reads those sums; any other marginal counts each row as its total weight (``scale``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np
from sqlglot import exp

from dpsql.schema import ColumnDomain, range_value
from dpsql.sql.bounded_rows import bounded_rows, in_domain, in_range, relation_source, salted_order_key
from dpsql.sql.compile import CellFilter
from dpsql.sql.distinct_units import DistinctUnits, pairs
from dpsql.sql.literals import INT64_MAX, ColumnType, python_value, sql_literal
from dpsql.sql.moments import ValueEncoding

COUNT_NAME = "n"
VALUE_INDEX_NAME = "value_index"
GROUPING_NAME = "grouping_id"
UNIT_NAME = "unit"
UNITS_NAME = "units"
KEPT_NAME = "key_kept"  # 1 when a row keeps its key after key bounding, 0 when it goes to the remainder
KEY_TEXT_NAME = "key_text"  # the canonical text of a key (what the keyed aggregation returns instead of the value)
KEY_RANK_NAME = "key_in_unit"
ROW_KEY_NAME = "row_key"  # HASH of every column of a row: its identity in the salted order
ROW_IN_KEY_NAME = "row_in_key"

BOUNDED_NAME = "bounded_rows"  # the subquery of bounded rows, when they are not materialised
MANY_SETS = 64  # more grouping sets than this are read through covers (see BoundedAggregation._covers)
COVER_CELLS = 1 << 10  # most cells of a cover: it returns at most this many rows, each cover costs one scan of the rows
GROUPING_ARGUMENTS = 31  # columns per GROUPING() call: PostgreSQL takes fewer than 32, DuckDB fewer than 64
FLAT_BINS = 16  # bins columns with more bins find a row's bin by binary search in SQL
MIN_BETWEEN_RUN = 3  # a range mask's runs of at least this many cells become BETWEEN, shorter ones an IN list


def _one() -> exp.Expression:
    """``1 AS one``: the column of a SELECT that needs none (a count of rows only)."""
    return exp.alias_(exp.Literal.number(1), "one")


@dataclass(frozen=True)
class KeyedColumn:
    """A column without a declared domain in the statement: key bounding, and whether to count units."""

    name: str
    max_groups_per_unit: int
    max_rows_per_group: int
    count_units: bool  # selection needs the distinct units of every key
    joint: tuple[str, ...] = ()  # further columns without declared domain: a key is the tuple of their values

    @property
    def names(self) -> tuple[str, ...]:
        """The columns whose values form a key (one, or several selected jointly)."""
        return (self.name, *self.joint)

    @property
    def text_names(self) -> tuple[str, ...]:
        """The result columns of a key's canonical texts, one per column of :attr:`names`."""
        return tuple(KEY_TEXT_NAME if i == 0 else f"{KEY_TEXT_NAME}_{i}" for i in range(len(self.names)))


Key = str | None | tuple[str | None, ...]  # a key's canonical text; a tuple of them for jointly selected columns


def key_order(key: Key) -> tuple[object, ...]:
    """The fixed order of keys (NULL last in each column): the order noise is drawn in, whatever the engine's."""
    parts = key if isinstance(key, tuple) else (key,)
    return tuple((t is None, t or "") for t in parts)


def sorted_keys(keys: Iterable[Key]) -> tuple[Key, ...]:
    """Distinct keys in :func:`key_order` (texts of one column sort as strings, NULL last: hundreds of thousands
    of keys in a fraction of the time a sort key per key takes)."""
    distinct = set(keys)
    if all(type(k) is str or k is None for k in distinct):
        return (*sorted(k for k in distinct if k is not None), *((None,) if None in distinct else ()))  # type: ignore[type-var]
    return tuple(sorted(distinct, key=key_order))


@dataclass(frozen=True)
class KeyHistogram:
    """What a keyed aggregation returns, by key (its canonical text; None for the NULL key), in the order
    of the texts: ``counts[i]`` is the count table of key ``keys[i]``'s kept rows over the other
    attributes (marginal order, the key's axis removed), ``units[i]`` its distinct units (zeros when not
    counted), ``remainder`` the count table of the rows no unit could keep under its key. Empty (no key)
    when no row reaches the aggregation."""

    keys: tuple[Key, ...]
    units: np.ndarray
    counts: np.ndarray
    remainder: np.ndarray


@dataclass(frozen=True)
class BoundedAggregation:
    """Marginals over the bounded rows of ``table`` that pass ``row_filters`` (module doc)."""

    table: str | exp.Query  # a relation of the backend by name, or the query of a joined relation's rows
    columns: Mapping[str, ColumnDomain]  # every column the statement mentions, by name
    column_types: Mapping[str, ColumnType]  # backend type of each mentioned column
    marginals: tuple[tuple[str, ...], ...]  # attribute tuples to count over
    privacy_unit: str | None
    max_rows_per_unit: int
    salt: int  # secret, drawn once per registered table: orders each unit's rows for bounding
    row_columns: tuple[str, ...] = ()  # every column of the table: a row's identity for the salted order
    row_filters: tuple[CellFilter, ...] = ()  # the WHERE clause, applied to the bounded rows
    keyed: KeyedColumn | None = None  # a column without declared domain (one marginal, containing it)
    value: ValueEncoding | None = None  # an aggregated column: its moment cells (an attribute of the marginals)
    bounded: bool = False  # ``table`` already holds the bounded rows (tested and bounded): read it as it is
    distinct: DistinctUnits | None = None  # COUNT(DISTINCT unit): count each unit's kept group cells, not rows

    @property
    def weight_names(self) -> tuple[str, ...]:
        """The result columns of the moment-cell weights (none without an aggregated column, or with
        ``clip: auto``, whose weights follow the clip chosen after the read)."""
        return () if self.value is None or self.value.reads_index else tuple(f"w{k}" for k in range(self.value.cells))

    @property
    def value_index(self) -> str | None:
        """``clip: auto``: the result column of the values' base-grid index, a column of every grouping set."""
        return VALUE_INDEX_NAME if self.value is not None and self.value.reads_index else None

    @cached_property
    def sql_marginals(self) -> tuple[tuple[str, ...], ...]:
        """The grouping sets: each marginal without the moment cells (they are the weight sums), once."""
        moments = None if self.value is None else self.value.attribute
        return tuple(dict.fromkeys(tuple(c for c in m if c != moments) for m in self.marginals))

    @cached_property
    def _covers(self) -> dict[tuple[str, ...], tuple[str, ...]]:
        """The grouping set each marginal is read from: itself, or — when there are more than
        :data:`MANY_SETS` — a *cover*, a set of columns holding several marginals and at most
        :data:`COVER_CELLS` cells, from whose rows the marginal is summed. The engine aggregates once per
        grouping set (4,950 pairs of 100 columns: a minute in DuckDB); a few hundred covers hold them all.
        Built from the marginals and the domains alone (:func:`_greedy_covers`)."""
        marginals = self.sql_marginals
        if len(marginals) <= MANY_SETS:
            return {m: m for m in marginals}
        sizes = tuple((c, self.columns[c].size) for c in self.counted_columns)
        return dict(zip(marginals, _greedy_covers(marginals, sizes)))

    @cached_property
    def grouping_sets(self) -> tuple[tuple[str, ...], ...]:
        """The grouping sets the statement computes (see :attr:`_covers`)."""
        return tuple(dict.fromkeys(self._covers.values()))

    def alias(self, column: str) -> str:
        return f"c{list(self.columns).index(column)}"

    @cached_property
    def indexed_columns(self) -> frozenset[str]:
        """Columns that enter the SQL as cell numbers (CASE); the others enter as raw values. A binned
        column that is neither counted nor filtered only needs its domain test (``e0 ≤ v < ek``), which
        raw values answer more cheaply than the CASE. A counted HUGEINT or DECIMAL column enters as cell
        numbers too: its raw values read back as doubles, in which 2^127 - 1 and 2^127 are one value."""
        coupled = {c for f in self.row_filters if len(f.scope) > 1 for c in f.scope}
        filtered = {c for f in self.row_filters for c in f.scope}
        counted = {c for marginal in self.marginals for c in marginal}
        binned = {c for c, d in self.columns.items() if (d.kind == "bins" or _wide_range(d)) and c in counted | filtered}
        inexact = {c for c, d in self.columns.items() if c in counted and d.kind == "categories" and _inexact_number(self.column_types.get(c))}
        return frozenset(c for c in self.columns if c in binned | coupled | inexact)

    @cached_property
    def _tested_elsewhere(self) -> frozenset[str]:
        """Raw columns whose domain test the SQL can skip with the same result.

        * With a privacy unit, the bounded rows passed every domain test before bounding.
        * The keyed column has no domain to test.
        * A one-column WHERE mask on the column admits only declared values (categories, or an
          integer-typed range), which implies the test.
        * Without bounding, a column that every marginal groups by can be tested on the (small)
          result instead: rows with values outside the domain form their own groups, discarded there —
          when any value of its type reads back exactly (``_reads_back_exactly``): a DATE ``'infinity'``
          could not be read at all, and HUGEINT or DECIMAL values read as doubles could fall in a
          declared value's cell.
        """
        if self.privacy_unit is not None:
            return frozenset(self.columns)
        skipped = set(self.keyed.names) if self.keyed is not None else set()
        for cell_filter in self.row_filters:
            name = cell_filter.scope[0]
            if len(cell_filter.scope) == 1 and name not in self.indexed_columns:
                if self.columns[name].kind == "categories" or self.column_types[name].is_integer:
                    skipped.add(name)
        if self.privacy_unit is None:
            everywhere = set.intersection(*(set(m) for m in self.marginals)) if self.marginals else set()
            skipped |= {c for c in everywhere - self.indexed_columns if c not in self.columns or _reads_back_exactly(self.column_types[c])}
        return frozenset(skipped)

    @property
    def counted_columns(self) -> tuple[str, ...]:
        """Columns that appear in some marginal, in statement order."""
        wanted = {c for marginal in self.marginals for c in marginal}
        return tuple(c for c in self.columns if c in wanted)

    def statement(self) -> exp.Select:
        projections = [exp.alias_(self._projection(c), self.alias(c)) for c in self.columns]
        if self._carries_unit or self.distinct is not None:
            projections.append(exp.alias_(exp.column(self.privacy_unit, quoted=True), UNIT_NAME))  # type: ignore[arg-type]
        if self._carries_unit:
            identity = [exp.column(c, quoted=True) for c in self.row_columns] or [exp.Literal.number(0)]
            projections.append(exp.alias_(exp.func("HASH", *identity), ROW_KEY_NAME))
        if self.value_index is not None:
            projections.append(exp.alias_(self.value.index(self.value.read()), self.value_index))  # type: ignore[union-attr]
        elif self.value is not None:
            weights = self.value.weights(self.value.read())
            projections += [exp.alias_(w, name) for w, name in zip(weights, self.weight_names)]
        cells = exp.select(*(projections or [_one()])).from_(self._source())  # SELECT needs a column
        tests = [self._in_domain(c) for c in self.columns if c not in self._tested_elsewhere]
        tests += [self._filter(f) for f in self.row_filters]
        kept: exp.Query = exp.select(*self._counted_references()).from_(cells.subquery("cells"))
        if tests:
            kept = kept.where(exp.and_(*tests, copy=False), copy=False)  # type: ignore[attr-defined]
        if self.keyed is not None:
            kept = self._key_bounded(kept)
        if self.distinct is not None:  # the kept (unit, group cell) pairs take the rows' place
            group = [exp.column(self.alias(c)) for c in self.distinct.group]
            kept = pairs(kept, group, exp.column(UNIT_NAME), self.distinct.max_groups_per_unit, self.salt)
        return self._aggregate(kept)

    @property
    def _carries_unit(self) -> bool:
        """Key bounding ranks each unit's keys and rows: the unit and the row's identity go along."""
        return self.privacy_unit is not None and self.keyed is not None

    def _source(self) -> exp.Expression:
        """The table (materialised bounded rows, or no privacy unit), else the bounded rows as a subquery."""
        table = relation_source(self.table, "joined_rows")
        if self.privacy_unit is None or self.bounded:
            return table
        tested = {c: d for c, d in self.columns.items() if self.keyed is None or c not in self.keyed.names}
        rows = bounded_rows(self.table, tested, self.column_types, self.privacy_unit, self.max_rows_per_unit, self.salt, self.row_columns)
        return rows.subquery(BOUNDED_NAME)

    # -- the pieces of the statement -------------------------------------------------------------------
    def _projection(self, name: str) -> exp.Expression:
        return self._cell_index(name) if name in self.indexed_columns else exp.column(name, quoted=True)

    def _in_domain(self, name: str) -> exp.Expression:
        """The row's value of ``name`` lies in the declared domain (or is NULL in a nullable column)."""
        reference = exp.column(self.alias(name))
        if name in self.indexed_columns:
            return reference.is_(exp.null()).not_()
        return in_domain(reference, self.columns[name], self.column_types[name])

    def _filter(self, cell_filter: CellFilter) -> exp.Expression:
        if len(cell_filter.scope) == 1 and cell_filter.scope[0] not in self.indexed_columns:
            return self._value_filter(cell_filter.scope[0], cell_filter.mask)
        return self._cell_filter(cell_filter)

    def _value_filter(self, name: str, mask: np.ndarray) -> exp.Expression:
        """A one-column mask as a test on raw values (a range column's runs become BETWEENs)."""
        column = self.columns[name]
        reference = exp.column(self.alias(name))
        tests: list[exp.Expression] = []
        if column.nullable and mask[column.null_cell]:
            tests.append(reference.is_(exp.null()))
        selected = np.flatnonzero(mask[: column.value_cells])
        if column.kind == "categories" and len(selected):
            tests.append(exp.In(this=reference.copy(), expressions=[sql_literal(column.values[i]) for i in selected]))
        elif len(selected):  # runs of a range: BETWEEN, and the short ones' values in one IN list
            low = column.values[0]
            runs = np.split(selected, np.flatnonzero(np.diff(selected) > 1) + 1)
            single = [sql_literal(range_value(low, int(i))) for run in runs if len(run) < MIN_BETWEEN_RUN for i in run]
            if single:
                tests.append(exp.In(this=reference.copy(), expressions=single))
            for run in (r for r in runs if len(r) >= MIN_BETWEEN_RUN):
                bounds = {"low": sql_literal(range_value(low, int(run[0]))), "high": sql_literal(range_value(low, int(run[-1])))}
                tests.append(exp.Between(this=reference.copy(), **bounds))
        return exp.paren(exp.or_(*tests, copy=False)) if len(tests) > 1 else tests[0]

    def _cell_filter(self, cell_filter: CellFilter) -> exp.Expression:
        """``flat cell number over the filter's scope IN (cells where the mask holds)`` (or NOT IN the others)."""
        strides = np.cumprod((1,) + cell_filter.mask.shape[:0:-1])[::-1]
        flat: exp.Expression | None = None
        for column, stride in zip(cell_filter.scope, strides):
            term: exp.Expression = exp.column(self.alias(column))
            if stride != 1:
                term = exp.Mul(this=term, expression=exp.Literal.number(int(stride)))
            flat = term if flat is None else exp.Add(this=flat, expression=term)
        selected = np.flatnonzero(cell_filter.mask.ravel())
        rejected = np.flatnonzero(~cell_filter.mask.ravel())
        listed = selected if len(selected) <= len(rejected) else rejected
        membership = exp.In(this=flat, expressions=[exp.Literal.number(int(i)) for i in listed])
        return membership if listed is selected else exp.Not(this=membership)

    def _counted_references(self) -> list[exp.Expression]:
        """The counted columns (a constant when only the total is counted: SELECT needs a column), and
        the unit and row identity when key bounding needs them."""
        counted: list[exp.Expression] = [exp.column(self.alias(c)) for c in self.counted_columns]
        counted += [exp.column(name) for name in self.weight_names]
        if self.value_index is not None:
            counted.append(exp.column(self.value_index))
        if self._carries_unit:
            counted += [exp.column(UNIT_NAME), exp.column(ROW_KEY_NAME)]
        elif self.distinct is not None:
            counted.append(exp.column(UNIT_NAME))
        return counted or [_one()]

    def _key_bounded(self, bounded: exp.Query) -> exp.Select:
        """The bounded rows with the keyed column's value kept where key bounding allows, else NULL and
        ``key_kept = 0`` (module docstring). Without a privacy unit every row keeps its key (k = r = 1).
        Jointly selected columns: a key is the tuple of their values, bounded as one."""
        assert self.keyed is not None
        key = [exp.column(self.alias(c)) for c in self.keyed.names]
        others = [exp.column(self.alias(c)) for c in self.counted_columns if c not in self.keyed.names]
        others += [exp.column(name) for name in self.weight_names]  # an aggregated column's moment weights ride along
        if self.privacy_unit is None:
            flagged = [*(k.copy() for k in key), exp.alias_(exp.Literal.number(1), KEPT_NAME), *others]
            return exp.select(*flagged).from_(bounded.subquery("bounded", copy=False))
        unit = exp.column(UNIT_NAME)
        # the tuple's parts in the columns' name order: which tuples a unit keeps does not depend on which of the
        # columns a statement selects and which are public (the same rows, whatever the route to their keys)
        canonical = [k for _, k in sorted(zip(self.keyed.names, key), key=lambda pair: pair[0])]
        key_rank = exp.Window(
            this=exp.DenseRank(),
            partition_by=[unit.copy()],
            order=exp.Order(
                expressions=[
                    exp.Ordered(this=salted_order_key([unit.copy(), *(k.copy() for k in canonical)], self.salt)),
                    *(exp.Ordered(this=k.copy()) for k in canonical),
                ]
            ),
        )
        row_in_key = exp.Window(
            this=exp.RowNumber(),
            partition_by=[unit.copy(), *(k.copy() for k in key)],
            order=exp.Order(
                expressions=[exp.Ordered(this=salted_order_key([unit.copy(), *(k.copy() for k in canonical), exp.column(ROW_KEY_NAME)], self.salt))]
            ),
        )
        ranked = exp.select(
            *(k.copy() for k in key), unit.copy(), *(o.copy() for o in others),
            exp.alias_(key_rank, KEY_RANK_NAME), exp.alias_(row_in_key, ROW_IN_KEY_NAME),
        ).from_(bounded.subquery("bounded", copy=False))
        within = exp.and_(
            exp.column(KEY_RANK_NAME) <= exp.Literal.number(self.keyed.max_groups_per_unit),
            exp.column(ROW_IN_KEY_NAME) <= exp.Literal.number(self.keyed.max_rows_per_group),
        )
        kept_keys = [exp.alias_(exp.Case().when(within.copy(), k.copy()), self.alias(c)) for k, c in zip(key, self.keyed.names)]
        kept_flag = exp.Case().when(within.copy(), exp.Literal.number(1)).else_(exp.Literal.number(0))
        return exp.select(*kept_keys, exp.alias_(kept_flag, KEPT_NAME), unit.copy(), *(o.copy() for o in others)).from_(ranked.subquery("ranked"))

    def _aggregate(self, kept: exp.Query) -> exp.Select:
        if self.keyed is not None:
            return self._keyed_aggregate(kept)
        counted = [exp.column(self.alias(c)) for c in self.counted_columns]
        every = [exp.column(self.value_index)] if self.value_index is not None else []  # in every grouping set
        outputs: list[exp.Expression] = [c.copy() for c in counted] + [c.copy() for c in every]
        grouped = len(self.grouping_sets) > 1 and bool(counted)
        if grouped:  # which grouping set a row belongs to: GROUPING() over chunks of columns (engine limits)
            for name, chunk in zip(self.grouping_names, self._grouping_chunks):
                outputs.append(exp.alias_(exp.func("GROUPING", *(exp.column(self.alias(c)) for c in chunk)), name))
        outputs.append(exp.alias_(exp.Count(this=exp.Star()), COUNT_NAME))
        outputs += [exp.alias_(_exact_sum(exp.column(name)), name) for name in self.weight_names]
        query = exp.select(*outputs).from_(kept.subquery("bounded", copy=False), copy=False)
        if grouped:
            sets = [exp.Tuple(expressions=[exp.column(self.alias(c)) for c in m] + [c.copy() for c in every]) for m in self.grouping_sets]
            return query.group_by(exp.GroupingSets(expressions=sets), copy=False)
        grouped_by = counted + every
        return query.group_by(*grouped_by, copy=False) if grouped_by else query

    def _keyed_aggregate(self, kept: exp.Query) -> exp.Select:
        """Counts per (raw key, ``key_kept``, other cells); with ``count_units`` also the distinct units of
        each (raw key, ``key_kept``), in a second grouping set."""
        assert self.keyed is not None
        key_columns = [*(exp.column(self.alias(c)) for c in self.keyed.names), exp.column(KEPT_NAME)]
        others = [exp.column(self.alias(c)) for c in self.counted_columns if c not in self.keyed.names]
        texts = [exp.alias_(key_text(k.copy()), name) for k, name in zip(key_columns, self.keyed.text_names)]  # keys leave as text only
        query = exp.select(*texts, key_columns[-1].copy(), *others).from_(kept.subquery("key_bounded", copy=False))
        query = query.select(exp.alias_(exp.Count(this=exp.Star()), COUNT_NAME))
        query = query.select(*(exp.alias_(_exact_sum(exp.column(name)), name) for name in self.weight_names))
        if not self.keyed.count_units:
            return query.group_by(*(c.copy() for c in key_columns + others))
        units = exp.Count(this=exp.Distinct(expressions=[exp.column(UNIT_NAME)])) if self.privacy_unit else exp.Count(this=exp.Star())
        query = query.select(exp.alias_(units, UNITS_NAME))
        if not others:
            return query.group_by(*(c.copy() for c in key_columns))
        query = query.select(exp.alias_(exp.func("GROUPING", *(c.copy() for c in others)), GROUPING_NAME))
        sets = [exp.Tuple(expressions=[c.copy() for c in key_columns + others]), exp.Tuple(expressions=[c.copy() for c in key_columns])]
        return query.group_by(exp.GroupingSets(expressions=sets))

    @cached_property
    def _grouping_chunks(self) -> tuple[tuple[str, ...], ...]:
        """The counted columns in chunks of at most :data:`GROUPING_ARGUMENTS`, one ``GROUPING()`` each."""
        counted = self.counted_columns
        return tuple(counted[i : i + GROUPING_ARGUMENTS] for i in range(0, len(counted), GROUPING_ARGUMENTS))

    @property
    def grouping_names(self) -> tuple[str, ...]:
        """The result columns of the ``GROUPING()`` chunks: ``grouping_id``, ``grouping_id_1``, …"""
        return tuple(GROUPING_NAME if i == 0 else f"{GROUPING_NAME}_{i}" for i in range(len(self._grouping_chunks)))

    # -- reading the result ----------------------------------------------------------------------------
    def grouping_id(self, marginal: tuple[str, ...]) -> tuple[int, ...]:
        """The ``GROUPING(...)`` values (one per chunk of columns) of the rows belonging to ``marginal``."""
        return tuple(
            sum(1 << (len(chunk) - 1 - i) for i, c in enumerate(chunk) if c not in marginal) for chunk in self._grouping_chunks
        )

    def value_histogram(self, result: Mapping[str, np.ndarray]) -> np.ndarray:
        """``clip: auto``: the rows per base-grid index of the aggregated column (NULLs left out), over every
        row the statement counts (one grouping set's rows: each row is in each set once)."""
        assert self.value is not None and self.value_index is not None
        counts = np.asarray(np.ma.filled(result[COUNT_NAME], 0), dtype=np.int64)
        index = np.asarray(np.ma.filled(result[self.value_index], self.value.null_index), dtype=np.int64)
        first = self.grouping_sets[0] if self.grouping_sets else ()
        chosen = np.zeros(len(counts), dtype=bool)
        chosen[self._rows_by_set(result, len(counts)).get(first, np.arange(len(counts)))] = True
        chosen &= index != self.value.null_index
        for column in (c for c in first if c in self.columns):
            chosen &= self._cells_of(column, result[self.alias(column)])[1]
        return self.value.histogram(index[chosen], counts[chosen])

    def marginal_arrays(self, result: Mapping[str, np.ndarray], clip: int | tuple[float, float] | None = None) -> dict[tuple[str, ...], np.ndarray]:
        """Dense count arrays (shape = domain sizes, in the marginal's order) from the statement's result.
        Result rows holding a value outside its column's domain (see ``_tested_elsewhere``) are dropped.
        With ``clip: auto``, ``clip`` is the chosen clip's base-grid index: the moment cells are computed here."""
        counts = np.asarray(np.ma.filled(result[COUNT_NAME], 0), dtype=np.int64)
        weights = [np.asarray(np.ma.filled(result[name], 0), dtype=np.int64) for name in self.weight_names]
        if self.value_index is not None:
            assert self.value is not None and clip is not None
            index = np.asarray(np.ma.filled(result[self.value_index], self.value.null_index), dtype=np.int64)
            per_row = self.value.cell_weights(index, clip)
            weights = [counts * per_row[:, cell] for cell in range(self.value.cells)]
        if self.value is not None:  # every row is worth its total weight in every marginal
            counts = counts * self.value.scale
        rows_of = self._rows_by_set(result, len(counts))
        by_set: dict[tuple[str, ...], list[tuple[str, ...]]] = {grouping_set: [] for grouping_set in self.grouping_sets}
        for marginal in self.marginals:
            by_set[self._covers[self._plain(marginal)]].append(marginal)
        arrays = {}
        for grouping_set, marginals in by_set.items():
            rows = rows_of[grouping_set]  # a cover's rows are finer: summed into its marginals below
            # each column's cells for this grouping set's rows only, shared by the marginals read from it
            cells_read = {c: self._cells_of(c, result[self.alias(c)][rows]) for c in dict.fromkeys(c for m in marginals for c in self._plain(m))}
            counted = [m for m in marginals if m and len(self._plain(m)) == len(m)]
            arrays.update(_summed_together(counted, cells_read, counts[rows], {c: self.columns[c].size for c in cells_read}))
            for marginal in (m for m in marginals if not (m and len(self._plain(m)) == len(m))):
                plain = self._plain(marginal)
                valid = np.logical_and.reduce([cells_read[c][1] for c in plain]) if plain else np.ones(len(rows), dtype=bool)
                kept = rows[valid]
                if not marginal:
                    arrays[marginal] = np.array(counts[kept].sum(), dtype=np.int64)
                    continue
                # the moment cells: the weight sums, placed at the attribute's position in the marginal
                assert self.value is not None
                index = tuple(cells_read[c][0][valid] for c in plain)
                table = np.zeros((*(self.columns[c].size for c in plain), self.value.cells), dtype=np.int64)
                for cell, weight in enumerate(weights):
                    np.add.at(table, (*index, np.full(len(kept), cell)), weight[kept])
                arrays[marginal] = np.moveaxis(table, -1, marginal.index(self.value.attribute))
        return {m: arrays[m] for m in self.marginals}

    def _plain(self, marginal: tuple[str, ...]) -> tuple[str, ...]:
        """A marginal's grouped columns (without the moment attribute)."""
        return tuple(c for c in marginal if c in self.columns)

    def _rows_by_set(self, result: Mapping[str, np.ndarray], count: int) -> dict[tuple[str, ...], np.ndarray]:
        """The result rows of each grouping set, by its ``GROUPING()`` values: one sort of the rows, not one
        scan of them per grouping set (a batch may have thousands)."""
        everything = np.arange(count, dtype=np.int64)
        if not (len(self.grouping_sets) > 1 and self.counted_columns):
            return {m: everything for m in self.grouping_sets}
        ids = [np.asarray(np.ma.filled(result[name], -1), dtype=np.int64).reshape(-1) for name in self.grouping_names]
        code = _row_codes(ids, count)
        order = np.argsort(code, kind="stable")
        starts = np.flatnonzero(np.diff(code[order], prepend=-1, append=-1))  # where each id's rows begin, and the end
        by_id = {tuple(int(i[order[a]]) for i in ids): order[a:b] for a, b in zip(starts[:-1], starts[1:])}
        empty = np.zeros(0, dtype=np.int64)
        return {m: by_id.get(self.grouping_id(m), empty) for m in self.grouping_sets}

    def key_histogram(self, result: Mapping[str, np.ndarray]) -> KeyHistogram:
        """The keyed aggregation's result by key text (the class docstring of :class:`KeyHistogram`).
        Rows whose value of a declared column lies outside its domain are dropped (as in
        :meth:`marginal_arrays`). Total: any result, the empty one included, gives a histogram."""
        assert self.keyed is not None and len(self.marginals) == 1
        moments = None if self.value is None else self.value.attribute  # the moment cells: weight sums, not row counts
        marginal = [c for c in self.marginals[0] if c not in self.keyed.names]
        others = [c for c in marginal if c != moments]
        shape = tuple(self.value.cells if c == moments else self.columns[c].size for c in marginal)  # type: ignore[union-attr]
        weights = [np.asarray(np.ma.filled(result[name], 0), dtype=np.int64).reshape(-1) for name in self.weight_names]
        counts = np.asarray(np.ma.filled(result[COUNT_NAME], 0), dtype=np.int64).reshape(-1)
        columns = [
            [None if missing else str(text) for text, missing in zip(np.ma.getdata(result[name]), np.ma.getmaskarray(result[name]))]
            for name in self.keyed.text_names
        ]
        texts: list[Key] = columns[0] if not self.keyed.joint else list(zip(*columns))  # type: ignore[assignment]
        kept = np.asarray(np.ma.filled(result[KEPT_NAME], 0), dtype=np.int64).reshape(-1) == 1
        full = np.ones(len(counts), dtype=bool)
        if self.keyed.count_units and others:
            ids = np.asarray(np.ma.filled(result[GROUPING_NAME], -1)).reshape(-1)
            full, per_key = ids == 0, ids != 0
        else:
            per_key = full.copy()
        cells = {c: self._cells_of(c, result[self.alias(c)]) for c in others}
        for column in others:
            full &= cells[column][1]
        # in a fixed order, not the backend's row order (which varies with its threads): the noise each key
        # draws is then the same for the same data and seed, on every machine
        found = sorted_keys(texts[i] for i in np.flatnonzero(kept & (per_key | full)))
        index = {key: position for position, key in enumerate(found)}

        def key_positions(rows: np.ndarray) -> np.ndarray:
            return np.fromiter((index[texts[r]] for r in rows), dtype=np.int64, count=len(rows))

        units = np.zeros(len(found), dtype=np.int64)
        if self.keyed.count_units:
            distinct = np.asarray(np.ma.filled(result[UNITS_NAME], 0), dtype=np.int64).reshape(-1)
            rows = np.flatnonzero(per_key & kept)
            units[key_positions(rows)] = distinct[rows]
        table = np.zeros((len(found), *shape), dtype=np.int64)
        remainder = np.zeros(shape, dtype=np.int64)
        rows = np.flatnonzero(full)
        stored = kept[rows]  # a row under a kept key goes to its key's table, the others to the remainder
        keys_of = key_positions(rows[stored])
        positions = [cells[c][0][rows] for c in others]

        def add(axes: list[np.ndarray], weight: np.ndarray) -> None:
            flat = np.ravel_multi_index(axes, shape) if shape else np.zeros(len(rows), dtype=np.int64)
            np.add.at(table.reshape(len(found), math.prod(shape)), (keys_of, flat[stored]), weight[rows][stored])
            np.add.at(remainder.reshape(-1), flat[~stored], weight[rows][~stored])

        if moments is None or moments not in marginal:  # a row counts as its total weight (1 without moments)
            add(positions, counts * (1 if self.value is None else self.value.scale))
        else:
            at = marginal.index(moments)
            for cell, weight in enumerate(weights):
                add([*positions[:at], np.full(len(rows), cell, dtype=np.int64), *positions[at:]], weight)
        return KeyHistogram(found, units, table, remainder)

    def _cells_of(self, name: str, returned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cell numbers of a result column and whether each value lies in the domain (raw values are
        mapped through the domain; NULL goes to the NULL cell of a nullable column)."""
        column = self.columns[name]
        missing = np.ma.getmaskarray(returned)
        values = np.ma.getdata(returned)
        if name in self.indexed_columns:
            return np.where(missing, 0, values).astype(np.int64), ~missing
        if column.kind == "range" and not column.is_date_range:
            numbers = np.where(missing, np.nan, np.asarray(values, dtype=np.float64))
            offsets = numbers - int(column.values[0])
            valid = ~missing & (offsets >= 0) & (offsets < column.value_cells) & (offsets == np.floor(offsets))
            cells = np.where(valid, offsets, 0).astype(np.int64)
        else:
            found = np.full(len(values), -1, dtype=np.int64)
            present = ~missing
            if values.dtype.kind == "i":  # integers: found among the sorted integer keys, no sort of the rows
                keys, key_cells = self._integer_keys(name)
                if keys.size:
                    position = np.minimum(np.searchsorted(keys, values), keys.size - 1)
                    found = np.where(present & (keys[position] == values), key_cells[position], -1)
            elif present.any():  # each distinct value looked up once (a wide batch returns millions of rows)
                try:
                    distinct, inverse = np.unique(values[present], return_inverse=True)
                except TypeError:  # values that do not sort (mixed types): looked up one by one
                    distinct, inverse = values[present], np.arange(int(present.sum()))
                lookup = self._cell_lookup(name)
                mapped = np.array([lookup.get(python_value(v, self.column_types[name]), -1) for v in distinct], dtype=np.int64)
                found[present] = mapped[inverse.reshape(-1)]
            valid = found >= 0
            cells = np.where(valid, found, 0)
        if column.nullable:
            cells = np.where(missing, column.null_cell, cells)
            valid = valid | missing
        return cells, valid

    @cached_property
    def _integer_keys_by_column(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return {}

    def _integer_keys(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The 64-bit integers :meth:`_cell_lookup` finds a cell for (a domain value equal to an integer:
        ``1``, ``True``, ``1.0``), sorted, and their cells: what an integer result column is mapped by
        (built once per column)."""
        if name not in self._integer_keys_by_column:
            self._integer_keys_by_column[name] = self._sorted_integer_keys(name)
        return self._integer_keys_by_column[name]

    def _sorted_integer_keys(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        lookup = self._cell_lookup(name)
        found = {}
        for key in lookup:
            try:
                number = int(key)  # type: ignore[call-overload]
            except (TypeError, ValueError, OverflowError):
                continue
            if -(1 << 63) <= number < 1 << 63 and number in lookup:
                found[number] = lookup[number]
        keys = np.array(sorted(found), dtype=np.int64)
        return keys, np.array([found[int(k)] for k in keys], dtype=np.int64)

    def _cell_lookup(self, name: str) -> dict[object, int]:
        column = self.columns[name]
        if column.kind == "range":  # dates
            low = column.values[0]
            return {range_value(low, i): i for i in range(column.value_cells)}
        return {v: i for i, v in enumerate(column.values)}

    # -- cell numbers in SQL -----------------------------------------------------------------------------
    def _cell_index(self, name: str) -> exp.Expression:
        """``CASE`` mapping the value to its cell number; NULL for values outside the domain. Casts see
        only values inside the domain (the CASE yields NULL first), so no value can make them fail."""
        column = self.columns[name]
        reference = exp.column(name, quoted=True)
        case = exp.Case()
        if column.nullable:
            case = case.when(reference.is_(exp.null()), exp.Literal.number(column.null_cell), copy=False)
        if column.kind == "categories":
            for index, value in enumerate(column.values):
                case = case.when(exp.EQ(this=reference.copy(), expression=sql_literal(value)), exp.Literal.number(index), copy=False)
        elif column.kind == "range":
            low = column.values[0]
            inside = exp.Case().when(in_range(reference.copy(), column, self.column_types[name]), reference.copy())
            if column.is_date_range:
                offset: exp.Expression = exp.DateDiff(this=inside, expression=sql_literal(low), unit=exp.var("DAY"))
            else:
                offset = exp.Sub(this=exp.cast(inside, "BIGINT"), expression=sql_literal(low))
            case = case.when(in_range(reference.copy(), column, self.column_types[name]), offset, copy=False)
        else:
            edges = column.values
            case = case.when(exp.LT(this=reference.copy(), expression=sql_literal(edges[0])), exp.null(), copy=False)
            if len(edges) - 1 <= FLAT_BINS:
                for index, upper in enumerate(edges[1:]):
                    case = case.when(exp.LT(this=reference.copy(), expression=sql_literal(upper)), exp.Literal.number(index), copy=False)
            else:
                below_last = exp.LT(this=reference.copy(), expression=sql_literal(edges[-1]))
                line = _edges_on_a_line(edges) if self.column_types[name].is_integer else None
                if line is not None:  # edges e₀ + ⌊(k·W + B)/n⌋: the cell is one integer division, exact
                    bins, span, offset = line
                    above = exp.Add(this=exp.Sub(this=reference.copy(), expression=sql_literal(edges[0])), expression=exp.Literal.number(1))
                    scaled = exp.Sub(this=exp.Mul(this=exp.Literal.number(bins), expression=exp.Paren(this=above)), expression=exp.Literal.number(offset + 1))
                    index: exp.Expression = exp.cast(exp.IntDiv(this=exp.Paren(this=scaled), expression=exp.Literal.number(span)), "BIGINT")
                else:  # a binary search, log2(bins) comparisons per row instead of one per bin
                    index = _bin_search(reference, edges, 0, len(edges) - 1)
                case = case.when(below_last, index, copy=False)
        return case


def key_text(key: exp.Expression) -> exp.Expression:
    """A key's canonical text: the engine's own rendering of the group's value (module doc)."""
    return exp.cast(key, "TEXT")


EXACT_DOUBLE = 1 << 53  # integers up to this read back exactly as doubles
_WIDE_INTEGERS = (exp.DataType.Type.INT128, exp.DataType.Type.UINT128, exp.DataType.Type.INT256, exp.DataType.Type.UINT256)
_FLOATING = (exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE)


def _wide_range(column: ColumnDomain) -> bool:
    """An integer range beyond ±2^53: its raw values would read back as inexact doubles, so it enters the
    statement as its cell number (a BIGINT computed in SQL)."""
    return column.kind == "range" and not column.is_date_range and max(abs(int(v)) for v in column.values) > EXACT_DOUBLE  # type: ignore[call-overload]


def _inexact_number(column_type: ColumnType | None) -> bool:
    """A numeric type whose values read back as doubles that may merge two of them (HUGEINT, DECIMAL)."""
    return column_type is not None and column_type.is_numeric and not _reads_back_exactly(column_type)


def _reads_back_exactly(column_type: ColumnType) -> bool:
    """Whether every value of the type comes back from the engine as the same Python value, whatever it is
    (text, booleans, integers up to 64 bits, doubles with NaN and ±infinity); dates (``'infinity'``),
    HUGEINT and DECIMAL do not."""
    data_type = column_type.data_type
    if data_type is None:
        return False
    if column_type.is_integer:
        return not data_type.is_type(*_WIDE_INTEGERS)
    return column_type.is_text or column_type.is_boolean or data_type.is_type(*_FLOATING)


def _exact_sum(weights: exp.Expression) -> exp.Expression:
    """``SUM`` of a moment cell's integer weights as a BIGINT, which every engine returns exactly (DuckDB's
    HUGEINT and PostgreSQL's NUMERIC sums would come back as doubles or decimals). A row weighs at most
    ``GRID²`` units, so the sum fits for up to 5·10¹¹ rows per group; beyond, it saturates rather than
    failing (DuckDB, PostgreSQL; Spark's own BIGINT sum wraps there). The sum of no rows is 0, not NULL
    (LEAST skips NULLs: it would make an empty total the bound itself)."""
    total = exp.func("COALESCE", exp.Sum(this=weights), exp.Literal.number(0))
    saturated = exp.func("LEAST", total, exp.Literal.number(INT64_MAX))
    return exp.cast(saturated, "BIGINT")


def _summed(index: tuple[np.ndarray, ...], counts: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``counts`` summed into a zero array of ``shape`` at ``index``: by ``np.bincount`` (doubles, exact
    while the total stays below 2^53), else by ``np.add.at`` (exact 64-bit integers, slower)."""
    if int(np.abs(counts).sum(dtype=np.float64)) < EXACT_DOUBLE // 2:
        flat = np.ravel_multi_index(index, shape)
        return np.rint(np.bincount(flat, weights=counts, minlength=math.prod(shape))).astype(np.int64).reshape(shape)
    table = np.zeros(shape, dtype=np.int64)
    np.add.at(table, index, counts)
    return table


def _summed_together(
    marginals: list[tuple[str, ...]], cells: Mapping[str, tuple[np.ndarray, np.ndarray]], counts: np.ndarray, sizes: Mapping[str, int]
) -> dict[tuple[str, ...], np.ndarray]:
    """Count arrays of ``marginals`` (columns of ``cells``: each column's cell and in-domain flag per row)
    from the rows' ``counts``, each row counted where all of the marginal's columns are in their domain:
    the marginals of one arity at once — their rows' flat cell numbers, offset into one array of all their
    cells, summed by one :func:`_summed` — not a call per marginal (a wide batch has thousands per read)."""
    found: dict[tuple[str, ...], np.ndarray] = {}
    position = {c: i for i, c in enumerate(cells)}
    matrix = np.stack([cells[c][0] for c in cells]) if cells else np.zeros((0, len(counts)), dtype=np.int64)
    inside = np.stack([cells[c][1] for c in cells]) if cells else np.zeros((0, len(counts)), dtype=bool)
    by_arity: dict[int, list[tuple[str, ...]]] = {}
    for marginal in marginals:
        by_arity.setdefault(len(marginal), []).append(marginal)
    for group in by_arity.values():
        columns = np.array([[position[c] for c in m] for m in group])  # (marginals, arity)
        shapes = np.array([[sizes[c] for c in m] for m in group], dtype=np.int64)
        strides = np.cumprod(np.concatenate([np.ones((len(group), 1), dtype=np.int64), shapes[:, :0:-1]], axis=1), axis=1)[:, ::-1]
        flat = np.einsum("mkr,mk->mr", matrix[columns], strides)  # each row's cell in each marginal
        cells_of = shapes.prod(axis=1)
        offsets = np.concatenate([[0], np.cumsum(cells_of)[:-1]])
        weights = np.where(inside[columns].all(axis=1), counts[None, :], 0)
        table = _summed((np.ravel(flat + offsets[:, None]),), np.ravel(weights), (int(cells_of.sum()),))
        for marginal, shape, offset, size in zip(group, shapes, offsets, cells_of):
            found[marginal] = table[offset : offset + size].reshape(tuple(shape))
    return found


def _row_codes(columns: list[np.ndarray], count: int) -> np.ndarray:
    """One integer per row, equal for rows equal in every column and ordered like the rows' tuples
    (lexicographically): each column's values ranked, then merged two at a time and ranked again, so
    no code exceeds ``count²``. Sorting one integer array is far cheaper than ``np.unique(axis=0)``."""
    code = np.zeros(count, dtype=np.int64)
    for column in columns:
        _, ranks = np.unique(column, return_inverse=True)
        _, code = np.unique(code * (int(ranks.max(initial=0)) + 1) + ranks.reshape(-1), return_inverse=True)
        code = code.reshape(-1).astype(np.int64)
    return code


@lru_cache(maxsize=16)
def _greedy_covers(marginals: tuple[tuple[str, ...], ...], sizes: tuple[tuple[str, int], ...]) -> tuple[tuple[str, ...], ...]:
    """Each marginal's cover (:attr:`BoundedAggregation._covers`) from public facts alone — the marginals
    and the counted columns' sizes, in statement order — so a repeated batch finds them here.

    Covers are grown one at a time, the greedy rule for covering designs: a cover starts from the largest
    marginal not yet held and takes, while its cells stay within :data:`COVER_CELLS`, the column that
    completes the most marginals not yet held (the smaller column on a tie); when no column completes any,
    the missing columns of the first marginal that still fits. Counts are kept per column and updated only
    for the marginals of the column just taken, so 4,950 pairs of binary columns are covered in about 0.2 s
    (155 covers of 10 columns; taking each marginal into the cover it enlarges least needed 506).

    The cell limit trades scans for rows: each cover is one more pass of the engine over the rows, and
    returns up to its cell count of rows (every counted column of the batch each), which are converted
    and summed here. At 2^10 cells, a repeat of those 4,950 pairs over 20,000 rows reads 0.16 M rows
    in 155 scans (at 2^16: 1.3 M rows in 66 scans, about twice the time)."""
    size, order = dict(sizes), {c: i for i, (c, _) in enumerate(sizes)}
    cells = lambda columns: math.prod(size[c] for c in columns)  # noqa: E731
    ranked = sorted(range(len(marginals)), key=lambda k: (-cells(marginals[k]), [order[c] for c in marginals[k]]))
    sets = [frozenset(m) for m in marginals]
    holding: dict[str, list[int]] = {c: [] for c in size}
    for k, columns in enumerate(sets):
        for column in columns:
            holding[column].append(k)
    chosen: list[int | None] = [None] * len(marginals)
    covers: list[tuple[str, ...]] = []
    pending = iter(ranked)
    for first in pending:
        if chosen[first] is not None:
            continue
        cover: set[str] = set()
        cover_cells = 1
        outside = {k: len(sets[k]) for k in ranked if chosen[k] is None and sets[k]}  # columns each open marginal lacks
        for k in ranked:
            if chosen[k] is None and not sets[k]:  # the total fits any cover
                chosen[k] = len(covers)
        completes = dict.fromkeys(size, 0)  # open marginals the column alone would complete
        for k, lacking in outside.items():
            if lacking == 1:
                completes[next(iter(sets[k]))] += 1

        def take(column: str) -> None:
            nonlocal cover_cells
            cover.add(column)
            cover_cells *= size[column]
            for k in holding[column]:
                if k not in outside:
                    continue
                outside[k] -= 1
                if outside[k] == 1:
                    completes[next(c for c in sets[k] if c not in cover)] += 1
                elif outside[k] == 0:
                    completes[column] -= 1
                    chosen[k] = len(covers)
                    del outside[k]

        for column in sorted(sets[first], key=order.__getitem__):
            take(column)
        while True:
            fitting = [c for c, n in completes.items() if n > 0 and c not in cover and cover_cells * size[c] <= COVER_CELLS]
            if fitting:
                take(max(fitting, key=lambda c: (completes[c], -size[c], -order[c])))
                continue
            grown = next((k for k in outside if cover_cells * cells(sets[k] - cover) <= COVER_CELLS), None)
            if grown is None:
                break
            for column in sorted(sets[grown] - cover, key=order.__getitem__):
                take(column)
        covers.append(tuple(sorted(cover, key=order.__getitem__)))
    return tuple(covers[i] for i in chosen)  # type: ignore[index]


def _edges_on_a_line(edges: tuple[object, ...]) -> tuple[int, int, int] | None:
    """``(n, W, B)`` when the integer edges are ``e_k = e₀ + ⌊(k·W + B)/n⌋`` for ``k = 0..n`` (``W = e_n − e₀``):
    equal widths (``B = 0``) and the rounded edges of an even split (``np.linspace`` then ``round``) alike;
    None otherwise. The cell of an integer ``v`` in ``[e₀, e_n)`` is then the largest ``k`` with ``e_k ≤ v``,
    ``⌊(n·(v − e₀ + 1) − B − 1) / W⌋``, an exact integer division; ``n·W`` stays below 2^52 so it is exact
    even where an engine divides in doubles (SQLite). Every ``B`` allowed by every edge is an interval; its
    lowest is taken."""
    if len(edges) < 2 or not all(type(e) is int for e in edges):
        return None
    bins, first = len(edges) - 1, int(edges[0])  # type: ignore[call-overload]
    span = int(edges[-1]) - first  # type: ignore[call-overload]
    if not 0 < bins * span < EXACT_DOUBLE // 2:
        return None
    low = max(bins * (int(e) - first) - k * span for k, e in enumerate(edges))  # type: ignore[call-overload]
    high = min(bins * (int(e) - first + 1) - k * span for k, e in enumerate(edges)) - 1  # type: ignore[call-overload]
    return (bins, span, low) if low <= high else None


def _bin_search(reference: exp.Expression, edges: tuple[object, ...], low: int, high: int) -> exp.Expression:
    """The cell number of a value known to lie in ``[edges[low], edges[high])``: nested ``CASE``s halving
    the bins."""
    if high - low == 1:
        return exp.Literal.number(low)
    middle = (low + high) // 2
    below = exp.LT(this=reference.copy(), expression=sql_literal(edges[middle]))
    return exp.Case().when(below, _bin_search(reference, edges, low, middle), copy=False).else_(
        _bin_search(reference, edges, middle, high), copy=False
    )
