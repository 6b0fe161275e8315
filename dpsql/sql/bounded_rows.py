"""The bounded rows of a table: every row that passes the domain tests, at most ``max_rows_per_unit`` per unit.

One SELECT, built as a sqlglot AST so every backend can transpile it::

    WITH candidates AS (
      SELECT <every column>, HASH(<every column>) AS row_key FROM <table>   -- (dpsql's names are __dpsql_…)
      WHERE <each declared column's value lies in its domain> AND <unit> IS NOT NULL
    ), over_bound AS (
      SELECT <unit> FROM candidates GROUP BY <unit> HAVING COUNT(*) > <max_rows_per_unit>
    )
    SELECT <every column> FROM candidates WHERE NOT EXISTS (<the row's unit is in over_bound>)
    UNION ALL
    SELECT <every column> FROM (
      SELECT <every column>, ROW_NUMBER() OVER (PARTITION BY <unit> ORDER BY HASH(HASH(<unit>, row_key, <salt>))) AS row_in_unit
      FROM candidates WHERE EXISTS (<the row's unit is in over_bound>)
    ) WHERE row_in_unit <= <max_rows_per_unit>

The rule looks at one unit's own rows and a secret salt only — never at a statement — so it is the same
for every statement on the table: the bounded rows are a fixed table, materialised once per registered
table where the backend can (:mod:`dpsql.bounded_tables`) or inlined as a subquery of every statement
where it cannot, with the same rows either way. A statement's WHERE clause and its own cells are
applied to these rows (:mod:`dpsql.sql.bounded`), after bounding.

The domain test drops rows whose value is NULL (in a column not declared nullable) or outside the
declared domain; rows whose unit is NULL are dropped too. Each unit keeps at most ``max_rows_per_unit``
rows, ordered by a salted hash of the unit and the row's identity (a hash of all its columns); the
salt is secret, drawn from OS entropy once per registered table. The choice is random and depends on
that unit's own rows only, which is all the privacy argument needs: the bounded table of a neighbour
differs by that one unit's kept rows. Units within the bound keep all their rows unranked (the window
sorts its input, by far the costliest step; only the rows of units over the bound go through it),
which keeps exactly the rows the window alone would keep.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from dpsql.schema import ColumnDomain
from dpsql.sql.literals import ColumnType, sql_literal

# names of dpsql's own: they stand beside the table's columns, so none may be a column's name
UNIT_NAME = "__dpsql_unit"
ROW_KEY_NAME = "__dpsql_row_key"  # HASH of every column of a row: its identity in the salted order
ROW_NUMBER_NAME = "__dpsql_row_in_unit"
CANDIDATES_NAME = "__dpsql_candidates"  # the rows that pass the domain tests, before bounding
OVER_BOUND_NAME = "__dpsql_over_bound"  # the units with more candidate rows than the bound
LEVEL_NAME = "__dpsql_level"  # a ranked row's level: the first 2^j rows of a unit are those of levels ≤ j
TOP_LEVEL_NAME = "__dpsql_top_level"  # the level of its unit's last row: how many rows the unit has, in levels
UNIT_ROWS_NAME = "__dpsql_unit_rows"


def salted_order_key(values: list[exp.Expression], salt: int) -> exp.Expression:
    """A random-looking order key for ``values`` under a secret ``salt``: ``HASH(HASH(…, salt))``.

    DuckDB's HASH XORs its last argument into the hash of the others, so ordering by
    ``HASH(…, salt)`` alone allows only the orders an XOR with a salt can make (8 of the 24 orders of
    4 rows). Hashing again mixes the salt into every bit, so the order within a unit is uniform."""
    return exp.func("HASH", exp.func("HASH", *values, exp.Literal.number(salt)))


def in_range(reference: exp.Expression, column: ColumnDomain, column_type: ColumnType) -> exp.Expression:
    """``lo <= value <= hi`` of a range column, and integral when the column's type is not."""
    low, high = column.values
    test: exp.Expression = exp.Between(this=reference, low=sql_literal(low), high=sql_literal(high))
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
        test = exp.or_(exp.paren(test), reference.copy().is_(exp.null()))
    return exp.paren(test)


def _level(rank: exp.Expression, bound: int) -> exp.Expression:
    """The level of a rank: 0 for 1, ``j`` for ``2^(j−1) < rank ≤ 2^j``, the last level for any rank beyond the bound."""
    levels = (bound - 1).bit_length() + 1
    case = exp.Case()
    for j in range(levels - 1):
        case = case.when(rank.copy() <= exp.Literal.number(1 << j), exp.Literal.number(j))
    return case.else_(exp.Literal.number(levels - 1))


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
    with_levels: bool = False,
) -> exp.Query:
    """The bounded rows of ``table`` (module doc): ``row_columns`` of the rows whose values of ``columns``
    lie in their domains, at most ``max_rows_per_unit`` per unit of ``privacy_unit``. ``with_levels``: every unit's
    rows are ranked (none left unranked) and each row carries its level, :data:`LEVEL_NAME` — ``j`` for the rows of
    rank ``2^(j−1) < r ≤ 2^j`` (0 for the first), so the rows of levels ``≤ j`` are the first ``2^j`` of the unit:
    a statement that chooses its bound keeps those (``dpsql.truncation``) — and the level its unit's last row would
    have, :data:`TOP_LEVEL_NAME` (the last level for units beyond the bound)."""
    kept_columns = tuple(dict.fromkeys((*row_columns, *columns, privacy_unit)))
    references = [exp.column(c, quoted=True) for c in kept_columns]
    identity = [exp.column(c, quoted=True) for c in row_columns] or [exp.Literal.number(0)]
    unit = exp.column(privacy_unit, quoted=True)
    tests = [in_domain(exp.column(name, quoted=True), domain, column_types[name]) for name, domain in columns.items()]
    tests.append(unit.copy().is_(exp.null()).not_())
    candidates = (
        exp.select(*(r.copy() for r in references), exp.alias_(exp.func("HASH", *identity), ROW_KEY_NAME))
        .from_(relation_source(table, "__dpsql_rows"))
        .where(exp.and_(*tests))
    )
    bound = exp.Literal.number(max_rows_per_unit)
    over_bound = (
        exp.select(exp.alias_(unit.copy(), UNIT_NAME)).from_(CANDIDATES_NAME).group_by(unit.copy())
        .having(exp.GT(this=exp.Count(this=exp.Star()), expression=bound))
    )
    same_unit = exp.EQ(this=exp.column(UNIT_NAME, table=OVER_BOUND_NAME), expression=exp.column(privacy_unit, table=CANDIDATES_NAME, quoted=True))
    over = exp.Exists(this=exp.select(exp.Literal.number(1)).from_(OVER_BOUND_NAME).where(same_unit))  # an anti-join everywhere
    order_key = salted_order_key([unit.copy(), exp.column(ROW_KEY_NAME)], salt)
    window = exp.Window(this=exp.RowNumber(), partition_by=[unit.copy()], order=exp.Order(expressions=[exp.Ordered(this=order_key)]))
    numbered = exp.select(*(r.copy() for r in references), exp.alias_(window, ROW_NUMBER_NAME)).from_(CANDIDATES_NAME).where(over)
    ranked = exp.select(*(r.copy() for r in references)).from_(numbered.subquery("__dpsql_numbered"))
    ranked = ranked.where(exp.column(ROW_NUMBER_NAME) <= bound.copy())
    unranked = exp.select(*(r.copy() for r in references)).from_(CANDIDATES_NAME).where(exp.Not(this=over.copy()))
    if with_levels:
        unit_rows = exp.Window(this=exp.Count(this=exp.Star()), partition_by=[unit.copy()])
        everyone = exp.select(
            *(r.copy() for r in references), exp.alias_(window.copy(), ROW_NUMBER_NAME), exp.alias_(unit_rows, UNIT_ROWS_NAME)
        ).from_(CANDIDATES_NAME)
        leveled = exp.select(
            *(r.copy() for r in references),
            exp.alias_(_level(exp.column(ROW_NUMBER_NAME), max_rows_per_unit), LEVEL_NAME),
            exp.alias_(_level(exp.column(UNIT_ROWS_NAME), max_rows_per_unit), TOP_LEVEL_NAME),
        ).from_(everyone.subquery("__dpsql_numbered"))
        leveled = leveled.where(exp.column(ROW_NUMBER_NAME) <= bound.copy())
        return leveled.with_(CANDIDATES_NAME, as_=candidates)
    both = exp.union(unranked, ranked, distinct=False)
    return both.with_(CANDIDATES_NAME, as_=candidates).with_(OVER_BOUND_NAME, as_=over_bound)
