"""GROUPING SETS, CUBE, ROLLUP and UNION ALL → plain per-grouping-set SELECTs, with DuckDB's output shape.

A statement is split into *branches*, one per grouping set (in the order DuckDB's expansion gives
them, duplicates kept). Each branch is an ordinary ``SELECT <grouped keys>, <counts> FROM t WHERE …
GROUP BY <set>`` that ``dpsql.sql.parse`` checks and ``dpsql.sql.compile`` compiles as usual, plus a
*layout* saying how each output column of the statement is filled from the branch's rows: a released
value, NULL for a column the set rolls up, or the constant ``GROUPING(…)`` bit mask (bit 1 = rolled up,
first argument most significant), exactly as standard SQL and DuckDB define them.

Expansion rules (standard SQL): a GROUP BY list is the cross product of its elements, each element
contributing a list of sets — a column ``a`` gives ``[(a)]``, ``ROLLUP(a, b)`` gives
``[(a, b), (a), ()]``, ``CUBE(a, b)`` gives every subset (``[(a, b), (a), (b), ()]``), and
``GROUPING SETS (e₁, e₂, …)`` concatenates the lists of its elements. Inside CUBE and ROLLUP a
parenthesised list is one composite element. ``UNION ALL`` of such SELECTs concatenates their branches;
ORDER BY / LIMIT / OFFSET apply to the released rows of the whole statement.

>>> s = split_statement("SELECT a, GROUPING(a) AS g, COUNT(*) FROM t GROUP BY ROLLUP (a)")
>>> [b.grouping_set for b in s.branches], [b.layout for b in s.branches]
([('a',), ()], [(0, Constant(value=0), 1), (Constant(value=None), Constant(value=1), 0)])
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.sql.parse import SUPPORTED

GroupingSet = tuple[str, ...]
MAX_GROUPING_SETS = 4096  # a statement expanding to more grouping sets is refused


@dataclass(frozen=True)
class Constant:
    """An output value that does not depend on the data: NULL (rolled-up column) or a GROUPING() mask."""

    value: int | None


Slot = int | Constant  # an int is a column index into the branch's own result rows


@dataclass(frozen=True)
class Branch:
    """One grouping set of a statement: a plain SELECT for it and how its rows fill the output columns."""

    grouping_set: GroupingSet  # column names as written, duplicates removed, in order of appearance
    sql: str  # plain SELECT … GROUP BY <set> (no ORDER BY / LIMIT), placeholders kept
    layout: tuple[Slot, ...]  # per output column
    parameters: tuple[int, int] = (0, 0)  # the slice of the statement's '?' parameters its SELECT binds

    def bound(self, parameters: Sequence[object] | None) -> Sequence[object] | None:
        """The statement's parameters that belong to this branch's SELECT (UNION ALL members differ)."""
        if parameters is None or isinstance(parameters, (str, bytes)) or not isinstance(parameters, Sequence):
            return parameters  # parse() reports the misuse
        start, stop = self.parameters
        return parameters[start:stop]


@dataclass(frozen=True)
class SplitStatement:
    """A statement as branches plus the ordering applied to the concatenated rows."""

    names: tuple[str, ...]  # output column names
    branches: tuple[Branch, ...]
    order_by: tuple[tuple[int, bool], ...]  # (output column, descending)
    limit: int | None
    offset: int
    placeholders: int = 0  # '?' parameters the whole statement takes


def is_extended(sql: str) -> bool:
    """Whether the statement uses GROUPING SETS / CUBE / ROLLUP / GROUPING() or is a UNION ALL."""
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except SqlglotError:
        return False
    if isinstance(tree, exp.SetOperation):
        return True
    return any(isinstance(node, (exp.Cube, exp.Rollup, exp.GroupingSets, exp.Grouping)) for node in tree.walk())


def split_statement(sql: str) -> SplitStatement:
    """Split one statement into grouping-set branches (see the module docstring)."""
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except SqlglotError as error:
        raise ProgrammingError(f"cannot parse SQL: {str(error).strip().splitlines()[0]}; check the syntax there. {SUPPORTED}") from error
    if len(statements) != 1:
        raise ProgrammingError(f"expected exactly one SQL statement, got {len(statements)}: pass a list to connection.workload()")
    tree = statements[0]
    selects = _union_members(tree)
    names, branches = None, []
    placeholders = 0
    for select in selects:
        if select is not tree:
            for arg in ("order", "limit", "offset"):
                if select.args.get(arg):
                    raise NotSupportedError(
                        f"UNION ALL: put ORDER BY / LIMIT / OFFSET after the last SELECT (they apply to all rows). {SUPPORTED}"
                    )
        member_names, member_branches = _split_select(select)
        count = sum(1 for node in select.walk() if isinstance(node, exp.Placeholder))
        member_branches = [dataclasses.replace(b, parameters=(placeholders, placeholders + count)) for b in member_branches]
        placeholders += count
        if names is None:
            names = member_names
        elif len(member_names) != len(names):
            raise ProgrammingError(
                f"UNION ALL: every SELECT must have the same number of columns ({len(names)} in the first, "
                f"{len(member_names)} in another)"
            )
        branches.extend(member_branches)
    if len(branches) > MAX_GROUPING_SETS:
        raise NotSupportedError(f"the statement expands to {len(branches)} grouping sets (limit {MAX_GROUPING_SETS}); use fewer")
    assert names is not None
    order_by = _order_by(tree, selects[0], names)
    return SplitStatement(names, tuple(branches), order_by, _row_count(tree, "limit"), _row_count(tree, "offset") or 0, placeholders)


def check_parameter_count(split: SplitStatement, parameters: Sequence[object] | None) -> None:
    """Refuse a parameter sequence of the wrong length (each UNION ALL member binds its own slice)."""
    given = () if parameters is None else parameters
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        return  # parse() reports the misuse
    if len(given) != split.placeholders:
        raise ProgrammingError(f"the statement has {split.placeholders} '?' placeholder(s) but {len(given)} parameter(s) were given")


def _union_members(tree: exp.Expression) -> list[exp.Select]:
    if isinstance(tree, exp.Union):
        if tree.args.get("distinct"):
            raise NotSupportedError(f"UNION (without ALL) is not supported: use UNION ALL. {SUPPORTED}")
        return _union_members(tree.this) + _union_members(tree.expression)
    if isinstance(tree, exp.SetOperation):
        raise NotSupportedError(f"{type(tree).__name__.upper()} is not supported; only UNION ALL combines SELECTs. {SUPPORTED}")
    if isinstance(tree, exp.Subquery):
        return _union_members(tree.this)
    if not isinstance(tree, exp.Select):
        raise ProgrammingError(f"expected a SELECT statement, got {tree.sql(dialect='duckdb')[:60]!r}")
    return [tree]


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
            items.append(_Item(name or inner.sql(dialect="duckdb"), inner, "count", ()))
    return items


def _split_select(select: exp.Select) -> tuple[tuple[str, ...], list[Branch]]:
    sets = expand_group_by(select.args.get("group"))
    grouped = {c.lower() for s in sets for c in s}
    items = _items(select)
    for item in items:
        strays = [c for c in item.columns if c.lower() not in grouped]
        if strays:
            where = "GROUPING()" if item.kind == "grouping" else "SELECT"
            raise ProgrammingError(f"{where}: column {strays[0]!r} must appear in the GROUP BY clause (or inside COUNT)")
    return tuple(i.name for i in items), [_branch(select, items, s) for s in sets]


def _branch(select: exp.Select, items: list[_Item], grouping_set: GroupingSet) -> Branch:
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
        plain = plain.group_by(*(exp.column(c, quoted=_needs_quotes(c)) for c in grouping_set), copy=False)
    return Branch(grouping_set, plain.sql(dialect="duckdb"), tuple(layout))


def _needs_quotes(name: str) -> bool:
    return not name.isidentifier()


# ---------------------------------------------------------------------------------------------------
# ORDER BY / LIMIT / OFFSET of the whole statement.
# ---------------------------------------------------------------------------------------------------


def _order_by(tree: exp.Expression, first: exp.Select, names: tuple[str, ...]) -> tuple[tuple[int, bool], ...]:
    order = tree.args.get("order")
    if order is None:
        return ()
    texts = [
        (e.this if isinstance(e, exp.Alias) else e).sql(dialect="duckdb").lower() for e in first.expressions
    ]
    keys = []
    for ordered in order.expressions:
        node = ordered.this
        keys.append((_order_target(node, names, texts), bool(ordered.args.get("desc"))))
    return tuple(keys)


def _order_target(node: exp.Expression, names: tuple[str, ...], texts: list[str]) -> int:
    if isinstance(node, exp.Literal) and not node.is_string:
        position = int(str(node.this)) if str(node.this).isdigit() else 0
        if not 1 <= position <= len(names):
            raise ProgrammingError(f"ORDER BY {node.sql()}: position must be between 1 and {len(names)}")
        return position - 1
    if isinstance(node, exp.Column) and not node.table:
        for index, name in enumerate(names):
            if name.lower() == node.name.lower():
                return index
    text = node.sql(dialect="duckdb").lower()
    if text in texts:
        return texts.index(text)
    raise NotSupportedError(
        f"ORDER BY {node.sql(dialect='duckdb')[:60]!r}: order by an output column, alias, COUNT or GROUPING() of the "
        f"SELECT list, or a position. {SUPPORTED}"
    )


def _row_count(tree: exp.Expression, arg: str) -> int | None:
    node = tree.args.get(arg)
    if node is None:
        return None
    value = node.expression if isinstance(node, (exp.Limit, exp.Offset)) else node
    if isinstance(value, exp.Literal) and not value.is_string and str(value.this).isdigit():
        return int(str(value.this))
    raise NotSupportedError(f"{arg.upper()} must be a non-negative integer literal, got {value.sql(dialect='duckdb')[:60]!r}")
