"""GROUPING SETS, CUBE and ROLLUP → one plain SELECT per grouping set, with DuckDB's output shape.

A SELECT is split into *branches*, one per grouping set (in the order DuckDB's expansion gives them,
duplicates kept). Each branch is an ordinary ``SELECT <grouped keys>, <counts> FROM t WHERE … GROUP BY
<set>`` (a sqlglot tree: nothing is parsed again) that :class:`dpsql.sql.parse.BranchChecker` checks,
plus a *layout* saying how each output column of the statement is filled from the branch's rows: a
released value, NULL for a column the set rolls up, or the constant ``GROUPING(…)`` bit mask (bit 1 =
rolled up, first argument most significant), exactly as standard SQL and DuckDB define them.

Expansion rules (standard SQL): a GROUP BY list is the cross product of its elements, each element
contributing a list of sets — a column ``a`` gives ``[(a)]``, ``ROLLUP(a, b)`` gives
``[(a, b), (a), ()]``, ``CUBE(a, b)`` gives every subset (``[(a, b), (a), (b), ()]``), and
``GROUPING SETS (e₁, e₂, …)`` concatenates the lists of its elements. Inside CUBE and ROLLUP a
parenthesised list is one composite element.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.sql.parse import SUPPORTED, refuse_select_item

GroupingSet = tuple[str, ...]
MAX_GROUPING_SETS = 4096  # a statement expanding to more grouping sets is refused


@dataclass(frozen=True)
class Constant:
    """An output value that does not depend on the data: NULL (rolled-up column) or a GROUPING() mask."""

    value: int | None


Slot = int | Constant  # an int is a column index into the branch's own result rows


@dataclass(frozen=True)
class SelectBranch:
    """One grouping set of a SELECT: its plain SELECT tree and how its rows fill the output columns."""

    grouping_set: GroupingSet  # column names as written, duplicates removed, in order of appearance
    select: exp.Select  # plain SELECT … GROUP BY <set>, no ORDER BY / LIMIT
    layout: tuple[Slot, ...]  # per output column


# ---------------------------------------------------------------------------------------------------
# Grouping-set expansion.
# ---------------------------------------------------------------------------------------------------


def _column_name(node: exp.Expression, clause: str) -> str:
    if isinstance(node, exp.Paren):
        return _column_name(node.this, clause)
    if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
        raise NotSupportedError(f"{clause}: {node.sql(dialect='duckdb')[:60]!r} is not a plain column. {SUPPORTED}")
    return node.name


def _composite(node: exp.Expression, clause: str) -> GroupingSet:
    """A column or a parenthesised list of columns, as one element of CUBE / ROLLUP / GROUPING SETS."""
    if isinstance(node, exp.Tuple):
        return tuple(_column_name(c, clause) for c in node.expressions)
    if isinstance(node, exp.Paren) and isinstance(node.this, exp.Tuple):
        return _composite(node.this, clause)
    return (_column_name(node, clause),)


def _element_sets(node: exp.Expression) -> list[GroupingSet]:
    """The list of grouping sets one GROUP BY element stands for."""
    if isinstance(node, exp.Cube):
        parts = [_composite(e, "GROUP BY CUBE") for e in node.expressions]
        chosen = itertools.product((True, False), repeat=len(parts))
        return [tuple(c for keep, part in zip(mask, parts) if keep for c in part) for mask in chosen]
    if isinstance(node, exp.Rollup):
        parts = [_composite(e, "GROUP BY ROLLUP") for e in node.expressions]
        return [tuple(c for part in parts[:size] for c in part) for size in range(len(parts), -1, -1)]
    if isinstance(node, exp.GroupingSets):
        return [s for element in node.expressions for s in _element_sets(element)]
    if isinstance(node, exp.Literal):
        raise NotSupportedError(f"GROUP BY by position ({node.sql()}) is not supported: name the columns. {SUPPORTED}")
    return [_composite(node, "GROUP BY")]


def expand_group_by(group: exp.Group | None) -> list[GroupingSet]:
    """The grouping sets of a GROUP BY clause (one empty set when there is none)."""
    if group is None:
        return [()]
    for arg in ("totals", "all"):
        if group.args.get(arg):
            raise NotSupportedError(f"GROUP BY {arg.upper()} is not supported. {SUPPORTED}")
    elements = list(group.expressions)
    for arg in ("grouping_sets", "cube", "rollup"):
        value = group.args.get(arg)
        elements += value if isinstance(value, list) else [value] if value else []
    combined: list[GroupingSet] = [()]
    for element in elements:
        combined = [left + right for left in combined for right in _element_sets(element)]
        if len(combined) > MAX_GROUPING_SETS:
            raise NotSupportedError(f"GROUP BY expands to more than {MAX_GROUPING_SETS} grouping sets; use fewer")
    return [_dedupe(s) for s in combined]


def _dedupe(columns: GroupingSet) -> GroupingSet:
    seen: dict[str, str] = {}
    for column in columns:
        seen.setdefault(column.lower(), column)
    return tuple(seen.values())


# ---------------------------------------------------------------------------------------------------
# One SELECT → branches.
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Item:
    name: str
    node: exp.Expression  # without alias
    kind: str  # "key", "grouping" or "count"
    columns: tuple[str, ...]  # key: (column,), grouping: its arguments, count: ()


def _items(select: exp.Select) -> list[_Item]:
    items = []
    for expression in select.expressions:
        inner = expression.this if isinstance(expression, exp.Alias) else expression
        name = expression.alias if isinstance(expression, exp.Alias) else None
        if isinstance(inner, exp.Grouping):
            if not inner.expressions:
                raise ProgrammingError("GROUPING() needs at least one column argument")
            columns = tuple(_column_name(c, "GROUPING") for c in inner.expressions)
            items.append(_Item(name or inner.sql(dialect="duckdb"), inner, "grouping", columns))
        elif isinstance(inner, exp.Column):
            items.append(_Item(name or inner.name, inner, "key", (inner.name,)))
        else:
            refuse_select_item(inner)
            items.append(_Item(name or inner.sql(dialect="duckdb"), inner, "count", ()))
    return items


def split_select(select: exp.Select) -> tuple[tuple[str, ...], list[SelectBranch]]:
    """The output names of a SELECT and its grouping-set branches."""
    sets = expand_group_by(select.args.get("group"))
    grouped = {c.lower() for s in sets for c in s}
    items = _items(select)
    for item in items:
        strays = [c for c in item.columns if c.lower() not in grouped]
        if strays:
            where = "GROUPING()" if item.kind == "grouping" else "SELECT"
            raise ProgrammingError(f"{where}: column {strays[0]!r} must appear in the GROUP BY clause (or inside COUNT)")
    return tuple(i.name for i in items), [_branch(select, items, s) for s in sets]


def _branch(select: exp.Select, items: list[_Item], grouping_set: GroupingSet) -> SelectBranch:
    members = {c.lower() for c in grouping_set}
    kept: list[exp.Expression] = []
    layout: list[Slot] = []
    for item, expression in zip(items, select.expressions):
        if item.kind == "grouping":
            bits = [0 if c.lower() in members else 1 for c in item.columns]
            layout.append(Constant(int("".join(map(str, bits)), 2)))
        elif item.kind == "key" and item.columns[0].lower() not in members:
            layout.append(Constant(None))
        else:
            layout.append(len(kept))
            kept.append(expression.copy())
    plain = select.copy()
    for arg in ("order", "limit", "offset", "group"):
        plain.set(arg, None)
    plain.set("expressions", kept)
    if grouping_set:
        plain = plain.group_by(*(exp.column(c, quoted=not c.isidentifier()) for c in grouping_set), copy=False)
    return SelectBranch(grouping_set, plain, tuple(layout))
