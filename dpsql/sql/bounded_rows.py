"""The bounded rows of a table: every row that passes the domain tests, at most ``max_rows_per_unit`` per unit.

Each unit keeps its ``max_rows_per_unit`` rows of least *order key* ``HASH(HASH(<unit>, HASH(<row>), <salt>))``
(all of them when it has no more): a salted hash of the unit and the row's identity (a hash of all its
columns); the salt is secret, drawn from OS entropy once per registered table. One SELECT, built as a sqlglot
AST so every backend can transpile it, in one of two forms that keep the same rows:

* ``window`` — what a statement reads inline (the first statement on a table, and backends that keep no
  relations): one window, the engine's own bounding query::

      WITH candidates AS (SELECT <every column>, <order key> AS __dpsql_order FROM <table>
                          WHERE <each declared column's value lies in its domain> AND <unit> IS NOT NULL)
      SELECT <every column> FROM (SELECT <every column>, ROW_NUMBER() OVER (PARTITION BY <unit> ORDER BY
          __dpsql_order) AS __dpsql_row_in_unit FROM candidates) WHERE __dpsql_row_in_unit <= <k>

  The engine carries only the columns the statement reads through the window's sort.

* ``thresholds`` — what is materialised once and kept (:mod:`dpsql.bounded_tables`): the window sorts the
  rows of units over the bound only, and only their unit and order key; each such unit's ``k``-th key is
  its *threshold*, and the kept rows are found by joins — so building the table holds about the memory of
  the engine's own bounding query, not that plus every column of every row in a sort::

      over_bound  = units with more than k candidate rows
      thresholds  = per such unit: the k-th least order key t, and how many rows with key t to keep
                    (k − #keys below t: equal keys are equal rows, whichever copies are kept)
      SELECT … FROM candidates WHERE <unit not in over_bound>
      UNION ALL SELECT … FROM candidates JOIN thresholds ON <same unit> AND __dpsql_order < t
      UNION ALL <the rows with key t, numbered within their unit, as many as the threshold keeps>

The rule looks at one unit's own rows and a secret salt only — never at a statement — so it is the same
for every statement on the table: the bounded rows are a fixed table, read inline by a statement or kept
once per registered table, with the same rows either way. A statement's WHERE clause and its own cells are
applied to these rows (:mod:`dpsql.sql.bounded`), after bounding.

The domain test drops rows whose value is NULL (in a column not declared nullable) or outside the
declared domain; rows whose unit is NULL are dropped too. The choice is random and depends on that
unit's own rows only, which is all the privacy argument needs: the bounded table of a neighbour
differs by that one unit's kept rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from sqlglot import exp

import planner
from dpsql.schema import ColumnDomain
from dpsql.sql.literals import ColumnType, sql_literal

# names of dpsql's own: they stand beside the table's columns, so none may be a column's name
UNIT_NAME = "__dpsql_unit"
ORDER_NAME = "__dpsql_order"  # the row's salted order key within its unit
ROW_NUMBER_NAME = "__dpsql_row_in_unit"
RANK_NAME = "__dpsql_rank"
THRESHOLD_NAME = "__dpsql_threshold"  # the k-th least order key of a unit over the bound
TIES_NAME = "__dpsql_ties"  # how many rows whose key equals the threshold that unit keeps
CANDIDATES_NAME = "__dpsql_candidates"  # the rows that pass the domain tests, before bounding
OVER_BOUND_NAME = "__dpsql_over_bound"  # the units with more candidate rows than the bound
THRESHOLDS_NAME = "__dpsql_thresholds"
LEVEL_NAME = "__dpsql_level"  # a ranked row's level: the first τ_j rows of a unit are those of levels ≤ j
TOP_LEVEL_NAME = "__dpsql_top_level"  # the level of its unit's last row: how many rows the unit has, in levels
UNIT_ROWS_NAME = "__dpsql_unit_rows"


def salted_order_key(values: list[exp.Expression], salt: int) -> exp.Expression:
    """A random-looking order key for ``values`` under a secret ``salt``: ``HASH(HASH(…, salt))``.

    DuckDB's HASH XORs its last argument into the hash of the others, so ordering by
    ``HASH(…, salt)`` alone allows only the orders an XOR with a salt can make (8 of the 24 orders of
    4 rows). Hashing again mixes the salt into every bit, so the order within a unit is uniform."""
    return exp.func("HASH", exp.func("HASH", *values, exp.Literal.number(salt)))


def day_of(reference: exp.Expression, column: ColumnDomain) -> exp.Expression:
    """What a range column's cells number: the value, or its day (``CAST(value AS DATE)``, total on every
    timestamp) when the range is one of days on a TIMESTAMP column."""
    return exp.cast(reference, "DATE") if column.is_timestamp_range else reference


def in_range(reference: exp.Expression, column: ColumnDomain, column_type: ColumnType) -> exp.Expression:
    """``lo <= value <= hi`` of a range column (its day's, for a range of days on a TIMESTAMP column), and integral
    when the column's type is not."""
    low, high = (v.date() for v in column.values) if column.is_timestamp_range else column.values  # type: ignore[attr-defined]
    test: exp.Expression = exp.Between(this=day_of(reference, column), low=sql_literal(low), high=sql_literal(high))
    if not column.is_date_range and not column_type.is_integer:
        test = exp.and_(test, exp.EQ(this=reference.copy(), expression=exp.func("FLOOR", reference.copy())))
    return test


def in_domain(reference: exp.Expression, column: ColumnDomain, column_type: ColumnType) -> exp.Expression:
    """The raw value ``reference`` lies in the declared domain of ``column`` (or is NULL in a nullable one)."""
    if column.kind == "categories":
        test: exp.Expression = exp.In(this=reference, expressions=[sql_literal(v) for v in column.values])
    elif column.kind == "bins":  # left-closed bins: inside [e0, ek)
        low, high = sql_literal(column.values[0]), sql_literal(column.values[-1])
        test = exp.and_(exp.GTE(this=reference, expression=low), exp.LT(this=reference.copy(), expression=high))
    else:
        test = in_range(reference, column, column_type)
    if column.nullable:
        test = exp.or_(exp.paren(test, copy=False), reference.copy().is_(exp.null()), copy=False)
    return exp.paren(test, copy=False)  # (no copies: a domain of 10⁶ categories is one long IN list)


def _level(rank: exp.Expression, levels: tuple[int, ...]) -> exp.Expression:
    """The level of a rank among the bounds ``levels`` (``planner.bound_levels``): 0 for 1, ``j`` for
    ``τ_(j−1) < rank ≤ τ_j``, the last level for any rank beyond the one before it."""
    case = exp.Case()
    for j, level in enumerate(levels[:-1]):
        case = case.when(rank.copy() <= exp.Literal.number(level), exp.Literal.number(j))
    return case.else_(exp.Literal.number(len(levels) - 1))


def relation_source(relation: str | exp.Query, alias: str) -> exp.Expression:
    """A FROM source for ``relation``: a table or view of the backend by name, or a query (a joined relation)."""
    if isinstance(relation, str):
        return exp.Table(this=exp.to_identifier(relation, quoted=True))
    return relation.subquery(exp.to_identifier(alias, quoted=True))


def bounded_rows(
    table: str | exp.Query,
    columns: Mapping[str, ColumnDomain],
    column_types: Mapping[str, ColumnType],
    privacy_unit: str,
    max_rows_per_unit: int,
    salt: int,
    row_columns: tuple[str, ...],
    form: BoundingForm = "window",
    with_levels: bool = False,
) -> exp.Query:
    """The bounded rows of ``table`` (module doc): ``row_columns`` of the rows whose values of ``columns``
    lie in their domains, at most ``max_rows_per_unit`` per unit of ``privacy_unit``, in the given form.
    ``with_levels`` (the window form): every row carries its level, :data:`LEVEL_NAME` — ``j`` for the rows of
    rank ``τ_(j−1) < r ≤ τ_j`` among the bounds ``τ`` of ``planner.bound_levels(max_rows_per_unit)`` (0 for the
    first), so the rows of levels ``≤ j`` are the first ``τ_j`` of the unit:
    a statement that chooses its bound keeps those (``dpsql.truncation``) — and the level its unit's last row would
    have, :data:`TOP_LEVEL_NAME` (the last level for units beyond the bound)."""
    kept_columns = tuple(dict.fromkeys((*row_columns, *columns, privacy_unit)))
    identity = [exp.column(c, quoted=True) for c in row_columns] or [exp.Literal.number(0)]
    unit = exp.column(privacy_unit, quoted=True)
    tests = [in_domain(exp.column(name, quoted=True), domain, column_types[name]) for name, domain in columns.items()]
    tests.append(unit.copy().is_(exp.null()).not_())
    order_key = salted_order_key([unit.copy(), exp.func("HASH", *identity)], salt)
    candidates = (
        exp.select(*(exp.column(c, quoted=True) for c in kept_columns), exp.alias_(order_key, ORDER_NAME))
        .from_(relation_source(table, "__dpsql_rows"))
        .where(exp.and_(*tests, copy=False), copy=False)
    )
    bound = exp.Literal.number(max_rows_per_unit)
    if with_levels:
        levels = planner.bound_levels(max_rows_per_unit)
        unit_rows = exp.Window(this=exp.Count(this=exp.Star()), partition_by=[unit.copy()])
        everyone = exp.select(
            *_columns(kept_columns), exp.alias_(_row_number(unit), ROW_NUMBER_NAME), exp.alias_(unit_rows, UNIT_ROWS_NAME)
        ).from_(CANDIDATES_NAME)
        leveled = exp.select(
            *_columns(kept_columns),
            exp.alias_(_level(exp.column(ROW_NUMBER_NAME), levels), LEVEL_NAME),
            exp.alias_(_level(exp.column(UNIT_ROWS_NAME), levels), TOP_LEVEL_NAME),
        ).from_(everyone.subquery("__dpsql_numbered"))
        leveled = leveled.where(exp.column(ROW_NUMBER_NAME) <= bound.copy())
        return leveled.with_(CANDIDATES_NAME, as_=candidates)
    if form == "window":
        numbered = exp.select(*_columns(kept_columns), exp.alias_(_row_number(unit), ROW_NUMBER_NAME)).from_(CANDIDATES_NAME)
        kept = exp.select(*_columns(kept_columns)).from_(numbered.subquery("__dpsql_numbered")).where(exp.column(ROW_NUMBER_NAME) <= bound)
        return kept.with_(CANDIDATES_NAME, as_=candidates)
    return _by_thresholds(kept_columns, unit, candidates, bound)


BoundingForm = Literal["window", "thresholds"]


def _columns(names: tuple[str, ...], table: str | None = None) -> list[exp.Expression]:
    return [exp.column(c, table=table, quoted=True) for c in names]


def _row_number(unit: exp.Expression, *partition: exp.Expression) -> exp.Window:
    """``ROW_NUMBER()`` within the unit in order of the salted key."""
    order = exp.Order(expressions=[exp.Ordered(this=exp.column(ORDER_NAME))])
    return exp.Window(this=exp.RowNumber(), partition_by=[unit.copy(), *partition], order=order)


def _by_thresholds(kept_columns: tuple[str, ...], unit: exp.Column, candidates: exp.Select, bound: exp.Literal) -> exp.Query:
    """The ``thresholds`` form of the module doc."""
    unit_name = unit.name
    over_bound = (
        exp.select(exp.alias_(unit.copy(), UNIT_NAME)).from_(CANDIDATES_NAME).group_by(unit.copy())
        .having(exp.GT(this=exp.Count(this=exp.Star()), expression=bound.copy()))
    )
    same_unit = exp.EQ(this=exp.column(UNIT_NAME, table=OVER_BOUND_NAME), expression=exp.column(unit_name, table=CANDIDATES_NAME, quoted=True))
    over = exp.Exists(this=exp.select(exp.Literal.number(1)).from_(OVER_BOUND_NAME).where(same_unit))
    rank = exp.Window(this=exp.func("RANK"), partition_by=[unit.copy()], order=exp.Order(expressions=[exp.Ordered(this=exp.column(ORDER_NAME))]))
    ranked = exp.select(
        exp.alias_(unit.copy(), UNIT_NAME), exp.column(ORDER_NAME), exp.alias_(_row_number(unit), ROW_NUMBER_NAME), exp.alias_(rank, RANK_NAME)
    ).from_(CANDIDATES_NAME).where(over)
    ties = exp.Sub(this=exp.Add(this=bound.copy(), expression=exp.Literal.number(1)), expression=exp.column(RANK_NAME))
    thresholds = (
        exp.select(exp.column(UNIT_NAME), exp.alias_(exp.column(ORDER_NAME), THRESHOLD_NAME), exp.alias_(ties, TIES_NAME))
        .from_(ranked.subquery("__dpsql_ranked")).where(exp.EQ(this=exp.column(ROW_NUMBER_NAME), expression=bound.copy()))
    )
    candidate_unit = exp.column(unit_name, table=CANDIDATES_NAME, quoted=True)
    joined_unit = exp.EQ(this=candidate_unit, expression=exp.column(UNIT_NAME, table=THRESHOLDS_NAME))
    key, threshold = exp.column(ORDER_NAME, table=CANDIDATES_NAME), exp.column(THRESHOLD_NAME, table=THRESHOLDS_NAME)
    within = exp.select(*_columns(kept_columns)).from_(CANDIDATES_NAME).where(exp.Not(this=over.copy()))
    below = exp.select(*_columns(kept_columns, CANDIDATES_NAME)).from_(CANDIDATES_NAME).join(
        THRESHOLDS_NAME, on=exp.and_(joined_unit, exp.LT(this=key, expression=threshold))
    )
    tied_rows = exp.select(
        *_columns(kept_columns, CANDIDATES_NAME), exp.column(TIES_NAME, table=THRESHOLDS_NAME),
        exp.alias_(exp.Window(this=exp.RowNumber(), partition_by=[candidate_unit.copy()]), ROW_NUMBER_NAME),
    ).from_(CANDIDATES_NAME).join(THRESHOLDS_NAME, on=exp.and_(joined_unit.copy(), exp.EQ(this=key.copy(), expression=threshold.copy())))
    tied = exp.select(*_columns(kept_columns)).from_(tied_rows.subquery("__dpsql_tied")).where(
        exp.LTE(this=exp.column(ROW_NUMBER_NAME), expression=exp.column(TIES_NAME))
    )
    kept = exp.union(exp.union(within, below, distinct=False), tied, distinct=False)
    # the candidates are read by four parts: computed for each (cheap: a scan), never held in memory
    kept = kept.with_(CANDIDATES_NAME, as_=candidates, materialized=False)
    return kept.with_(OVER_BOUND_NAME, as_=over_bound).with_(THRESHOLDS_NAME, as_=thresholds)
