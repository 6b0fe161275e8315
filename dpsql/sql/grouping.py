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
from dpsql.sql.derived import derived_key, is_derived
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
    """A grouping column's name: the column's, or a derived expression's key (``dpsql.sql.derived``)."""
    if is_derived(node):
        return derived_key(node)
    if isinstance(node, exp.Paren):
        return _column_name(node.this, clause)
    if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
        raise NotSupportedError(
            f"{clause}: {node.sql(dialect='duckdb')[:60]!r} is not a plain column or a derived group column; write GROUP BY the "
            f"column and the expression in the SELECT list (it is computed on the released keys). {SUPPORTED}"
        )
    return column_name(node)


def column_name(node: exp.Column) -> str:
    """A column's name as a group key: ``<qualifier>.<name>`` in a SELECT that joins tables (``dpsql.sql.joins``),
    its plain name otherwise."""
    select = node.find_ancestor(exp.Select)
    qualifier = [part.name for part in (node.args.get("table"),) if part is not None and part.name]
    if select is not None and select.args.get("joins") and qualifier:
        return f"{qualifier[0].lower()}.{node.name}"
    return node.name


def _key_column(name: str, joined: bool) -> exp.Column:
    """The column of a group key's name (:func:`column_name`), for a rebuilt GROUP BY."""
    if joined and "." in name:
        qualifier, plain = name.split(".", 1)
        return exp.column(plain, table=qualifier, quoted=not plain.isidentifier())
    return exp.column(name, quoted=not name.isidentifier())


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
            items.append(_Item(name or inner.name, inner, "key", (column_name(inner),)))
        elif is_derived(inner):
            items.append(_Item(name or inner.sql(dialect="duckdb"), inner, "key", (derived_key(inner),)))
        else:
            refuse_select_item(inner)
            items.append(_Item(name or _as_written(inner), inner, "count", ()))
    return items


def _as_written(node: exp.Expression) -> str:
    """An unaliased aggregate's output name: its DuckDB text, except ``PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY c)``,
    which keeps its own spelling (sqlglot writes it as a ``QUANTILE_CONT(c, q ORDER BY c)`` no one wrote)."""
    if isinstance(node, exp.WithinGroup) and isinstance(node.this, (exp.PercentileCont, exp.PercentileDisc)) and isinstance(node.expression, exp.Order):
        function = "PERCENTILE_CONT" if isinstance(node.this, exp.PercentileCont) else "PERCENTILE_DISC"
        order = ", ".join(o.this.sql(dialect="duckdb") + (" DESC" if o.args.get("desc") else "") for o in node.expression.expressions)
        return f"{function}({node.this.this.sql(dialect='duckdb')}) WITHIN GROUP (ORDER BY {order})"
    return node.sql(dialect="duckdb")


def split_select(select: exp.Select) -> tuple[tuple[str, ...], list[SelectBranch]]:
    """The output names of a SELECT and its grouping-set branches."""
    resolve_references(select)
    sets = expand_group_by(select.args.get("group"))
    grouped = {c.lower() for s in sets for c in s}
    items = _items(select)
    for item in items:
        strays = [c for c in item.columns if c.lower() not in grouped]
        if strays and item.kind == "key" and is_derived(item.node):
            raise NotSupportedError(
                f"SELECT: the expression {strays[0]!r} is not in GROUP BY; use it (or its alias or position) in GROUP BY: "
                "an expression over columns is supported as a group column of its own"
            )
        if strays:
            where = "GROUPING()" if item.kind == "grouping" else "SELECT"
            raise ProgrammingError(f"{where}: column {strays[0]!r} must appear in the GROUP BY clause (or inside COUNT)")
    group = select.args.get("group")
    derived = {derived_key(n).lower(): n for n in (group.find_all(exp.Expression) if group else ()) if is_derived(n)}
    return tuple(i.name for i in items), [_branch(select, items, s, derived) for s in sets]


def _branch(select: exp.Select, items: list[_Item], grouping_set: GroupingSet, derived: dict[str, exp.Expression]) -> SelectBranch:
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
        joined = bool(select.args.get("joins"))
        keys = (derived[c.lower()].copy() if c.lower() in derived else _key_column(c, joined) for c in grouping_set)
        plain = plain.group_by(*keys, copy=False)
    return SelectBranch(grouping_set, plain, tuple(layout))


# ---------------------------------------------------------------------------------------------------
# GROUP BY positions and aliases.
# ---------------------------------------------------------------------------------------------------


def resolve_references(select: exp.Select) -> None:
    """Replace, in place, each GROUP BY element that is a position (``GROUP BY 1``) by the SELECT item it
    points at, and each name that is the alias of a derived SELECT expression (``… AS band … GROUP BY
    band``) by that expression — also inside CUBE, ROLLUP and GROUPING SETS."""
    group = select.args.get("group")
    if group is None:
        return
    items = [(e.alias if isinstance(e, exp.Alias) else None, e.this if isinstance(e, exp.Alias) else e) for e in select.expressions]
    aliases: dict[str, exp.Expression] = {}
    for alias, node in items:
        if alias and is_derived(node):
            if any(c.name.lower() == alias.lower() for c in node.find_all(exp.Column)):
                raise NotSupportedError(
                    f"GROUP BY {alias}: the alias {alias!r} is also the name of the column its expression reads, so SQL "
                    f"would group by the column; use another alias for {node.sql(dialect='duckdb')[:60]!r}"
                )
            aliases.setdefault(alias.lower(), node)

    def substitute(node: exp.Expression) -> None:
        if isinstance(node, (exp.Cube, exp.Rollup, exp.GroupingSets, exp.Tuple)):
            for element in list(node.expressions):
                substitute(element)
        elif isinstance(node, exp.Paren):
            substitute(node.this)
        elif isinstance(node, exp.Literal) and not node.is_string:
            node.replace(_positional(node, items))
        elif isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases:
            node.replace(aliases[node.name.lower()].copy())

    for element in list(group.expressions):
        substitute(element)
    for arg in ("grouping_sets", "cube", "rollup"):
        value = group.args.get(arg)
        for element in value if isinstance(value, list) else [value] if value else []:
            substitute(element)


def _positional(node: exp.Literal, items: list[tuple[str | None, exp.Expression]]) -> exp.Expression:
    text = str(node.this)
    position = int(text) if text.isdigit() else 0
    if not 1 <= position <= len(items):
        raise ProgrammingError(f"GROUP BY {text}: a position must be between 1 and {len(items)} (the SELECT list's items)")
    target = items[position - 1][1]
    if isinstance(target, (exp.AggFunc, exp.Grouping)):
        raise ProgrammingError(
            f"GROUP BY {text}: item {position} of the SELECT list is {target.sql(dialect='duckdb')[:40]!r}, not a group "
            f"column; use the position of a column or of a derived expression"
        )
    return target.copy()
