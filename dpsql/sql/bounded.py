"""The one SQL statement a query sends to the backend: contribution bounding + the marginals.

Built as a sqlglot AST so any backend can transpile it to its dialect::

    SELECT c0, c1, [GROUPING(c0, c1) AS grouping_id,] COUNT(*) AS n
    FROM (
      WITH candidates AS (
        SELECT c0, c1, unit FROM (SELECT <col0> AS c0, <col1> AS c1, ..., <unit> AS unit FROM <table>)
        WHERE <every mentioned value lies in its domain> AND <WHERE clause> AND unit IS NOT NULL
      ), over_bound AS (
        SELECT unit FROM candidates GROUP BY unit HAVING COUNT(*) > <max_rows_per_unit>
      )
      SELECT c0, c1 FROM candidates WHERE NOT EXISTS (<candidates.unit in over_bound>)
      UNION ALL
      SELECT c0, c1 FROM (
        SELECT c0, c1, ROW_NUMBER() OVER (PARTITION BY unit ORDER BY HASH(HASH(unit, c0, c1, <salt>))) AS row_in_unit
        FROM candidates WHERE EXISTS (<candidates.unit in over_bound>)
      ) WHERE row_in_unit <= <max_rows_per_unit>
    )
    GROUP BY [GROUPING SETS] (...)

Each mentioned column enters as its raw value when that suffices (categories and integer ranges:
the few distinct values of the result are mapped to cell numbers in numpy afterwards), or as its
cell number computed by a ``CASE`` (bins, and columns coupled with others in one WHERE mask). The
domain test drops rows whose value is NULL (in a column not declared nullable) or outside the declared
domain. The WHERE clause arrives as masks over public domains (:class:`~dpsql.sql.compile.CellFilter`):
a one-column mask becomes ``IN`` / ``BETWEEN`` / bin-edge tests on the raw value, a mask coupling
several columns an ``IN`` over the flat cell number. Both rules look at one row at a time (public,
data-independent), and they run before bounding, so a unit's kept rows are chosen among the rows the
statement counts.

Each unit keeps at most ``max_rows_per_unit`` rows, ordered by a salted hash of the unit and the
row's cells (a fresh random salt per statement): the choice is random and depends on that unit's own
rows only. Units within the bound keep all their rows unranked (the window sorts its input, by far
the costliest step; only the rows of units over the bound go through it), which keeps exactly the
rows the window alone would keep. Without a privacy unit (one row = one unit) there is no bounding.
Rows whose privacy-unit value is NULL are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from sqlglot import exp

from dpsql.schema import ColumnDomain, Scalar
from dpsql.sql.compile import CellFilter

NUMERIC_TYPE_PREFIXES = (
    "TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
    "UBIGINT", "UHUGEINT", "DECIMAL", "NUMERIC", "DOUBLE", "FLOAT", "REAL",
)
INTEGER_TYPE_PREFIXES = (
    "TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
    "UHUGEINT",
)
COUNT_NAME = "n"
GROUPING_NAME = "grouping_id"
ROW_NUMBER_NAME = "row_in_unit"
UNIT_NAME = "unit"
CANDIDATES_NAME = "candidates"  # the rows that pass the domain tests and WHERE, before bounding
OVER_BOUND_NAME = "over_bound"  # the units with more candidate rows than the bound


def is_numeric_type(type_name: str) -> bool:
    return type_name.upper().startswith(NUMERIC_TYPE_PREFIXES)


def is_integer_type(type_name: str) -> bool:
    upper = type_name.upper()
    return upper.startswith(INTEGER_TYPE_PREFIXES) and not upper.startswith("INTERVAL")


def salted_order_key(values: list[exp.Expression], salt: int) -> exp.Expression:
    """A random-looking order key for ``values`` under a per-query ``salt``: ``HASH(HASH(…, salt))``.

    DuckDB's HASH XORs its last argument into the hash of the others, so ordering by
    ``HASH(…, salt)`` alone allows only the orders an XOR with a salt can make (8 of the 24 orders of
    4 rows). Hashing again mixes the salt into every bit, so the order within a unit is uniform."""
    return exp.func("HASH", exp.func("HASH", *values, exp.Literal.number(salt)))


@dataclass(frozen=True)
class BoundedAggregation:
    """Marginals over the bounded rows of ``table`` that pass the domain tests and ``row_filters``."""

    table: str
    columns: Mapping[str, ColumnDomain]  # every column the statement mentions, by name
    column_types: Mapping[str, str]  # backend type name of each mentioned column
    marginals: tuple[tuple[str, ...], ...]  # attribute tuples to count over
    privacy_unit: str | None
    max_rows_per_unit: int
    salt: int  # random per statement; orders each unit's rows for bounding
    row_filters: tuple[CellFilter, ...] = ()  # the WHERE clause, applied before bounding

    def alias(self, column: str) -> str:
        return f"c{list(self.columns).index(column)}"

    @cached_property
    def indexed_columns(self) -> frozenset[str]:
        """Columns that enter the SQL as cell numbers (CASE); the others enter as raw values. A binned
        column that is neither counted nor filtered only needs its domain test (``e0 ≤ v < ek``), which
        raw values answer more cheaply than the CASE."""
        coupled = {c for f in self.row_filters if len(f.scope) > 1 for c in f.scope}
        filtered = {c for f in self.row_filters for c in f.scope}
        counted = {c for marginal in self.marginals for c in marginal}
        binned = {c for c, d in self.columns.items() if d.kind == "bins" and c in counted | filtered}
        return frozenset(c for c in self.columns if c in binned or c in coupled)

    @cached_property
    def _tested_elsewhere(self) -> frozenset[str]:
        """Raw columns whose domain test the SQL can skip with the same result.

        * A one-column WHERE mask on the column admits only declared values (categories, or an
          integer-typed range), which implies the test.
        * Without bounding, a column that every marginal groups by can be tested on the (small)
          result instead: rows with values outside the domain form their own groups, discarded there.
        """
        skipped = set()
        for cell_filter in self.row_filters:
            name = cell_filter.scope[0]
            if len(cell_filter.scope) == 1 and name not in self.indexed_columns:
                if self.columns[name].kind == "categories" or is_integer_type(self.column_types[name]):
                    skipped.add(name)
        if self.privacy_unit is None:
            everywhere = set.intersection(*(set(m) for m in self.marginals)) if self.marginals else set()
            skipped |= everywhere - self.indexed_columns
        return frozenset(skipped)

    @property
    def counted_columns(self) -> tuple[str, ...]:
        """Columns that appear in some marginal, in statement order."""
        wanted = {c for marginal in self.marginals for c in marginal}
        return tuple(c for c in self.columns if c in wanted)

    def statement(self) -> exp.Select:
        projections = [exp.alias_(self._projection(c), self.alias(c)) for c in self.columns]
        if self.privacy_unit is not None:
            projections.append(exp.alias_(exp.column(self.privacy_unit, quoted=True), UNIT_NAME))
        cells = exp.select(*projections).from_(exp.Table(this=exp.to_identifier(self.table, quoted=True)))
        tests = [self._in_domain(c) for c in self.columns if c not in self._tested_elsewhere]
        tests += [self._filter(f) for f in self.row_filters]
        if self.privacy_unit is not None:
            tests.append(exp.column(UNIT_NAME).is_(exp.null()).not_())
        kept = exp.select(*self._counted_references()).from_(cells.subquery("cells"))
        if tests:
            kept = kept.where(exp.and_(*tests))
        if self.privacy_unit is not None:
            kept = self._bounded(kept)
        return self._aggregate(kept)

    # -- the pieces of the statement -------------------------------------------------------------------
    def _projection(self, name: str) -> exp.Expression:
        return self._cell_index(name) if name in self.indexed_columns else exp.column(name, quoted=True)

    def _in_domain(self, name: str) -> exp.Expression:
        """The row's value of ``name`` lies in the declared domain (or is NULL in a nullable column)."""
        reference = exp.column(self.alias(name))
        if name in self.indexed_columns:
            return reference.is_(exp.null()).not_()
        column = self.columns[name]
        if column.kind == "categories":
            test: exp.Expression = exp.In(this=reference, expressions=[self._literal(name, v) for v in column.values])
        elif column.kind == "bins":  # left-closed bins: inside [e0, ek)
            low, high = (exp.Literal.number(column.values[0]), exp.Literal.number(column.values[-1]))
            test = exp.and_(exp.GTE(this=reference, expression=low), exp.LT(this=reference.copy(), expression=high))
        else:
            low, high = int(column.values[0]), int(column.values[1])
            test = exp.Between(this=reference, low=exp.Literal.number(low), high=exp.Literal.number(high))
            if not is_integer_type(self.column_types[name]):
                test = exp.and_(test, exp.EQ(this=reference.copy(), expression=exp.func("FLOOR", reference.copy())))
        if column.nullable:
            test = exp.or_(exp.paren(test), reference.copy().is_(exp.null()))
        return exp.paren(test)

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
            values = [self._literal(name, column.values[i]) for i in selected]
            tests.append(exp.In(this=reference.copy(), expressions=values))
        elif len(selected):
            low = int(column.values[0])
            runs = np.split(selected, np.flatnonzero(np.diff(selected) > 1) + 1)
            for run in runs:
                bounds = {"low": exp.Literal.number(low + int(run[0])), "high": exp.Literal.number(low + int(run[-1]))}
                tests.append(exp.Between(this=reference.copy(), **bounds))
        return exp.paren(exp.or_(*tests)) if len(tests) > 1 else tests[0]

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
        """The counted columns (a constant when only the total is counted: SELECT needs a column)."""
        counted: list[exp.Expression] = [exp.column(self.alias(c)) for c in self.counted_columns]
        return counted or [exp.alias_(exp.Literal.number(1), "one")]

    def _bounded(self, kept: exp.Select) -> exp.Query:
        """At most ``max_rows_per_unit`` of each unit's rows in ``kept``, ranked by the salted hash.

        Units with at most that many rows keep them all, as the window would, without being ranked:
        one aggregation finds the units over the bound, and only their rows are numbered (a window
        sorts its input, the costly step). The kept rows are exactly those of the window alone.
        """
        bound = exp.Literal.number(self.max_rows_per_unit)
        if UNIT_NAME not in kept.named_selects:
            kept = kept.select(exp.column(UNIT_NAME))
        over_bound = (
            exp.select(exp.column(UNIT_NAME)).from_(CANDIDATES_NAME).group_by(exp.column(UNIT_NAME))
            .having(exp.GT(this=exp.Count(this=exp.Star()), expression=bound))
        )
        within = self._over_bound_test()
        order_key = salted_order_key(
            [exp.column(UNIT_NAME), *(exp.column(self.alias(c)) for c in self.counted_columns)], self.salt
        )
        window = exp.Window(
            this=exp.RowNumber(),
            partition_by=[exp.column(UNIT_NAME)],
            order=exp.Order(expressions=[exp.Ordered(this=order_key)]),
        )
        numbered = exp.select(*self._counted_references(), exp.alias_(window, ROW_NUMBER_NAME)).from_(CANDIDATES_NAME).where(within)
        ranked = exp.select(*self._counted_references()).from_(numbered.subquery("numbered"))
        ranked = ranked.where(exp.column(ROW_NUMBER_NAME) <= bound.copy())
        unranked = exp.select(*self._counted_references()).from_(CANDIDATES_NAME).where(exp.Not(this=within.copy()))
        both = exp.union(unranked, ranked, distinct=False)
        return both.with_(CANDIDATES_NAME, as_=kept).with_(OVER_BOUND_NAME, as_=over_bound)

    def _over_bound_test(self) -> exp.Expression:
        """``EXISTS (the candidate row's unit is over the bound)`` (EXISTS, not IN: an anti-join everywhere)."""
        same_unit = exp.EQ(
            this=exp.column(UNIT_NAME, table=OVER_BOUND_NAME), expression=exp.column(UNIT_NAME, table=CANDIDATES_NAME)
        )
        return exp.Exists(this=exp.select(exp.Literal.number(1)).from_(OVER_BOUND_NAME).where(same_unit))

    def _aggregate(self, kept: exp.Query) -> exp.Select:
        counted = [exp.column(self.alias(c)) for c in self.counted_columns]
        query = exp.select(*counted).from_(kept.subquery("bounded"))
        if len(self.marginals) > 1 and counted:
            query = query.select(exp.alias_(exp.func("GROUPING", *counted), GROUPING_NAME))
            sets = [exp.Tuple(expressions=[exp.column(self.alias(c)) for c in m]) for m in self.marginals]
            query = query.select(exp.alias_(exp.Count(this=exp.Star()), COUNT_NAME))
            return query.group_by(exp.GroupingSets(expressions=sets))
        query = query.select(exp.alias_(exp.Count(this=exp.Star()), COUNT_NAME))
        return query.group_by(*counted) if counted else query

    # -- reading the result ----------------------------------------------------------------------------
    def grouping_id(self, marginal: tuple[str, ...]) -> int:
        """The ``GROUPING(...)`` value of the rows belonging to ``marginal``."""
        counted = self.counted_columns
        return sum(1 << (len(counted) - 1 - i) for i, c in enumerate(counted) if c not in marginal)

    def marginal_arrays(self, result: Mapping[str, np.ndarray]) -> dict[tuple[str, ...], np.ndarray]:
        """Dense count arrays (shape = domain sizes, in the marginal's order) from the statement's result.
        Result rows holding a value outside its column's domain (see ``_tested_elsewhere``) are dropped."""
        counts = np.asarray(np.ma.filled(result[COUNT_NAME], 0), dtype=np.int64)
        grouped = len(self.marginals) > 1 and bool(self.counted_columns)
        ids = np.asarray(np.ma.filled(result[GROUPING_NAME], -1)) if grouped else None
        cells = {c: self._cells_of(c, result[self.alias(c)]) for c in self.counted_columns}
        arrays = {}
        for marginal in self.marginals:
            chosen = np.ones(len(counts), dtype=bool) if ids is None else ids == self.grouping_id(marginal)
            for column in marginal:
                chosen &= cells[column][1]
            if not marginal:
                arrays[marginal] = np.array(counts[chosen].sum(), dtype=np.int64)
                continue
            table = np.zeros(tuple(self.columns[c].size for c in marginal), dtype=np.int64)
            np.add.at(table, tuple(cells[c][0][chosen] for c in marginal), counts[chosen])
            arrays[marginal] = table
        return arrays

    def _cells_of(self, name: str, returned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cell numbers of a result column and whether each value lies in the domain (raw values are
        mapped through the domain; NULL goes to the NULL cell of a nullable column)."""
        column = self.columns[name]
        missing = np.ma.getmaskarray(returned)
        values = np.ma.getdata(returned)
        if name in self.indexed_columns:
            return np.where(missing, 0, values).astype(np.int64), ~missing
        if column.kind == "range":
            numbers = np.where(missing, np.nan, np.asarray(values, dtype=np.float64))
            offsets = numbers - int(column.values[0])
            valid = ~missing & (offsets >= 0) & (offsets < column.value_cells) & (offsets == np.floor(offsets))
            cells = np.where(valid, offsets, 0).astype(np.int64)
        else:
            lookup = {self._key(name, v): i for i, v in enumerate(column.values)}
            found = [None if m else lookup.get(_python(v)) for v, m in zip(values, missing)]
            valid = np.array([f is not None for f in found], dtype=bool)
            cells = np.array([f or 0 for f in found], dtype=np.int64)
        if column.nullable:
            cells = np.where(missing, column.null_cell, cells)
            valid = valid | missing
        return cells, valid

    # -- values ------------------------------------------------------------------------------------------
    def _literal(self, name: str, value: Scalar) -> exp.Expression:
        """A category value as a literal comparable with the column's backend type."""
        type_name = self.column_types[name]
        if isinstance(value, bool):
            return exp.Boolean(this=value) if type_name.upper() == "BOOLEAN" else exp.Literal.string(str(value).lower())
        if isinstance(value, (int, float)) and is_numeric_type(type_name):
            return exp.Literal.number(value) if value >= 0 else exp.Neg(this=exp.Literal.number(-value))
        return exp.Literal.string(value if isinstance(value, str) else str(value))

    def _key(self, name: str, value: Scalar) -> object:
        """How the backend returns the value a category literal matches."""
        literal = self._literal(name, value)
        if isinstance(literal, exp.Literal) and literal.is_string:
            return literal.this
        return value

    def _cell_index(self, name: str) -> exp.Expression:
        """``CASE`` mapping the value to its cell number; NULL for values outside the domain."""
        column = self.columns[name]
        reference = exp.column(name, quoted=True)
        case = exp.Case()
        if column.nullable:
            case = case.when(reference.is_(exp.null()), exp.Literal.number(column.null_cell))
        if column.kind == "categories":
            for index, value in enumerate(column.values):
                case = case.when(exp.EQ(this=reference.copy(), expression=self._literal(name, value)), exp.Literal.number(index))
        elif column.kind == "range":
            low, high = int(column.values[0]), int(column.values[1])
            inside: exp.Expression = exp.Between(this=reference.copy(), low=exp.Literal.number(low), high=exp.Literal.number(high))
            if not is_integer_type(self.column_types[name]):
                inside = exp.and_(inside, exp.EQ(this=reference.copy(), expression=exp.func("FLOOR", reference.copy())))
            case = case.when(inside, exp.Sub(this=exp.cast(reference.copy(), "BIGINT"), expression=exp.Literal.number(low)))
        else:
            edges = column.values
            case = case.when(exp.LT(this=reference.copy(), expression=exp.Literal.number(edges[0])), exp.null())
            for index, upper in enumerate(edges[1:]):
                case = case.when(exp.LT(this=reference.copy(), expression=exp.Literal.number(upper)), exp.Literal.number(index))
        return case


def _python(value: object) -> object:
    """numpy scalars → Python scalars (so they hash like the schema's values)."""
    return value.item() if isinstance(value, np.generic) else value


def check_column_types(columns: Mapping[str, ColumnDomain], column_types: Mapping[str, str], table: str) -> list[str]:
    """Problems (as messages naming the column) between declared domains and the table's column types."""
    problems = []
    for name, column in columns.items():
        if not column.is_known or name not in column_types:
            continue
        type_name = column_types[name]
        numeric = is_numeric_type(type_name)
        if column.kind in ("range", "bins") and not numeric:
            problems.append(f"column {name!r} of {table!r} has type {type_name}, but its {column.kind} domain needs numbers")
        if column.kind == "categories" and numeric and any(isinstance(v, str) for v in column.values):
            problems.append(f"column {name!r} of {table!r} has numeric type {type_name}, but its categories are strings")
    return problems
