"""``COUNT(DISTINCT <privacy unit>)``: how many distinct units each group holds, with a bounded contribution.

A unit may appear in many groups, so the distinct-unit counts of a ``GROUP BY`` are counts over a data set
of its own: the *pairs* (unit, group cell) of the table's bounded rows that pass the WHERE clause, one per
group cell a unit has rows in. Each unit keeps at most ``max_groups_per_unit`` (schema) of its pairs,
chosen by the table's secret salted order (``HASH(HASH(unit, group values, salt))``, the rule of
:mod:`dpsql.sql.bounded_rows` applied to groups), in the statement's SQL before anything is counted::

    SELECT c0, c1 FROM (
      SELECT c0, c1, ROW_NUMBER() OVER (PARTITION BY unit ORDER BY HASH(HASH(unit, c0, c1, salt)), c0, c1) AS group_in_unit
      FROM (SELECT DISTINCT unit, c0, c1 FROM <bounded rows passing the WHERE clause>)
    ) WHERE group_in_unit <= <max_groups_per_unit>

The distinct count of a group is then the number of pairs in its cell: a linear count over the pairs,
measured like any histogram. Adding or removing one unit changes at most ``k`` pairs, each in a different
cell of the group marginal, so the L1 sensitivity is ``k`` and the L2 sensitivity ``√k``, where
``k = min(max_groups_per_unit, max_rows_per_unit, number of group cells)`` — a unit's bounded rows fall in
at most ``max_rows_per_unit`` cells, and there are only so many cells (``GROUP BY ()`` has one: ``k = 1``).
Under pure DP the planner plans the statement with ``contributions = k`` (the L1 bound holds for any
strategy). Under zCDP it is measured by the summed identity over the group cells (``planner.identity_plan``
with ``distinct_cells=True``): every measured cell is a cell of the full group marginal, where a unit's
pairs never coincide, so the √k bound holds for it (docs/math.md §14). Kept measurements are filed under
the pairs' group columns and bound (:meth:`DistinctUnits.key`): they answer the same distinct count again,
never a count of rows.

What is refused, in prepare (before anything is read), and why:

* ``COUNT(DISTINCT column)`` of any other column, and any ``COUNT(DISTINCT …)`` on a row-level table:
  one unit may hold any number of distinct values, and nothing in the schema bounds how many it adds to
  one group, so no sensitivity can be stated;
* several grouping sets (``CUBE``, ``ROLLUP``, ``GROUPING SETS``, ``UNION ALL``) and batches of several
  statements: a rollup of distinct counts is not the sum of its finer cells (a unit in two cells is one
  unit in their total), so each grouping set would be a measurement of its own pairs — ask them as
  separate statements, each priced on its own;
* derived group columns and columns without a declared domain: the pairs are distinct over the cells the
  engine reads, which for those are not the cells released — except ``GROUP BY`` one such column alone: each key's
  distinct units are read with the keys themselves (``dpsql.keys.distinct_units``, ``dpsql.selection``).

Another aggregate beside it (``COUNT(*)``, ``SUM``, a quantile, …) is measured over rows, not pairs — a different
data vector: the statement is composed of one part per vector (``dpsql.sql.data_vectors``), each planned at its
share of the budget, charged once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import NotSupportedError
from dpsql.schema import Schema
from dpsql.sql.bounded_rows import salted_order_key
from dpsql.sql.moments import resolve
from dpsql.sql.parse import Query

GROUP_IN_UNIT_NAME = "group_in_unit"
WHY_UNIT_ONLY = (
    "one privacy unit may hold any number of distinct values of another column, so nothing in the schema bounds "
    "what it adds to a group's distinct count"
)


@dataclass(frozen=True)
class DistinctUnits:
    """A statement counting distinct units: the pairs are distinct over ``group`` (its GROUP BY columns),
    each unit keeps at most ``max_groups_per_unit`` of them, and ``contributions`` bounds the pairs one
    unit adds (module doc)."""

    unit: str
    group: tuple[str, ...]
    max_groups_per_unit: int
    contributions: int

    def describe(self) -> str:
        """What EXPLAIN says about the bound and the sensitivity."""
        over = "(" + ", ".join(self.group) + ")" if self.group else "the total"
        return (
            f"each {self.unit} in at most {self.contributions} cell(s) of {over}: "
            f"L1 sensitivity {self.contributions}, L2 sensitivity √{self.contributions} = {math.sqrt(self.contributions):.4g} "
            "(docs/glossary.md#groups-per-unit)"
        )

    def key(self) -> tuple[object, ...]:
        """What kept measurements of these pairs are filed under: only the same pairs answer them."""
        return ("distinct units", self.group, self.max_groups_per_unit)


def counted_unit(name: str, schema: Schema, table: str, table_columns: Sequence[str]) -> str:
    """The column of ``COUNT(DISTINCT name)``, checked to be the table's privacy unit."""
    column = resolve(name, table_columns, table, "SELECT COUNT(DISTINCT ...)")
    if schema.privacy_unit is None:
        raise NotSupportedError(
            f"SELECT COUNT(DISTINCT {column}): table {table!r} is row-level (privacy_unit: null), where {WHY_UNIT_ONLY}; "
            "use COUNT(*) or COUNT(column), or declare the table's privacy_unit to count distinct units"
        )
    if column != schema.privacy_unit:
        raise NotSupportedError(
            f"SELECT COUNT(DISTINCT {column}): only COUNT(DISTINCT {schema.privacy_unit}), the privacy unit, is supported: "
            f"{WHY_UNIT_ONLY}; use COUNT({column}) or COUNT(*) instead"
        )
    return column


def for_batch(counted: Sequence[tuple[Query, str]], branches: int, schema: Schema, table_columns: Sequence[str]) -> DistinctUnits | None:
    """The distinct-unit count of a batch of ``branches`` grouping sets (None when it has none), after refusing what
    cannot be priced; ``counted``: each ``COUNT(DISTINCT unit)`` of the batch, with its query (as written)."""
    if not counted:
        return None
    query, written = counted[0]
    unit = counted_unit(written, schema, query.table, table_columns)
    if branches > 1:
        raise NotSupportedError(
            f"SELECT COUNT(DISTINCT {unit}) with several grouping sets (CUBE, ROLLUP, GROUPING SETS, UNION ALL or a batch) "
            "is not supported: distinct counts do not add up over grouping sets (a unit in two cells is one unit in "
            "their total), so each grouping set is a measurement of its own; send one statement per grouping set"
        )
    if query.derived:
        raise NotSupportedError(
            f"SELECT COUNT(DISTINCT {unit}) with a derived group column ({query.derived[0].key[:60]!r}) is not supported: "
            "units would be counted once per cell of its source column, not of its values; use a declared column instead"
        )
    group = tuple(resolve(c, table_columns, query.table, "GROUP BY") for c in query.group_by)
    sizes: list[float] = []
    for name in group:
        domain = schema.column(name)
        if domain.kind == "keys" and len(group) == 1:  # keys to select, or released: the pipeline decides (``dpsql.selection``)
            sizes.append(math.inf)  # a unit's pairs are bounded by k, whatever the number of keys
            continue
        if domain.kind in ("keys", "unknown"):
            raise NotSupportedError(
                f"SELECT COUNT(DISTINCT {unit}) grouped by {name!r}, a column without a declared domain, is not supported: "
                f"declare {name!r}'s categories, range or bins in the schema"
            )
        sizes.append(domain.size)
    k = schema.max_groups_per_unit
    return DistinctUnits(unit, group, k, int(min(k, schema.max_rows_per_unit, math.prod(sizes))))


def pairs(rows: exp.Query, group: Sequence[exp.Expression], unit: exp.Expression, bound: int, salt: int) -> exp.Select:
    """The kept (unit, group cell) pairs of ``rows`` (module doc), as rows of the ``group`` columns."""
    distinct = exp.select(unit.copy(), *(g.copy() for g in group)).distinct().from_(rows.subquery("unit_rows"))
    order = [exp.Ordered(this=salted_order_key([unit.copy(), *(g.copy() for g in group)], salt))]
    order += [exp.Ordered(this=g.copy()) for g in group]  # ties of the hash: a fixed order still
    window = exp.Window(this=exp.RowNumber(), partition_by=[unit.copy()], order=exp.Order(expressions=order))
    ranked = exp.select(*(g.copy() for g in group), exp.alias_(window, GROUP_IN_UNIT_NAME)).from_(distinct.subquery("unit_groups"))
    kept = exp.select(*([g.copy() for g in group] or [exp.alias_(exp.Literal.number(1), "one")]))
    return kept.from_(ranked.subquery("ranked_groups")).where(exp.column(GROUP_IN_UNIT_NAME) <= exp.Literal.number(bound))
