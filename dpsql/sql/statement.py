"""SQL text → checked :class:`Statement` s: the text is parsed ONCE, then bound and split.

``parse_text`` hands the text to sqlglot (DuckDB dialect) once; a leading ``EXPLAIN`` marks the text as
a request for the plan (several ``;``-separated statements may follow it). ``bind_statement`` binds one
statement tree's ``?`` parameters (PEP 249 ``qmark``) and splits it into grouping-set branches — the
SELECTs of a ``UNION ALL`` concatenated, GROUPING SETS / CUBE / ROLLUP expanded (``dpsql.sql.grouping``)
— each checked into a :class:`~dpsql.sql.parse.Query`. ORDER BY / LIMIT / OFFSET belong to the whole
statement and apply to its released rows (post-processing). A plain ``SELECT … GROUP BY a, b`` is the
statement with one branch.

>>> statement = parse_statement("SELECT sex, COUNT(*) AS n FROM adult WHERE age > ? GROUP BY sex", (30,))
>>> branch = statement.branches[0]
>>> branch.query.group_by, branch.query.where
(('sex',), Comparison(column='age', operator='>', value=30))
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.sql.grouping import MAX_GROUPING_SETS, Constant, GroupingSet, Slot, split_select
from dpsql.sql.parse import SUPPORTED, BranchChecker, GroupKey, Query, bind_parameters, check_paramstyle, first_line

_EXPLAIN = re.compile(r"^\s*EXPLAIN\b", re.IGNORECASE)
_ANALYZE = re.compile(r"^\s*ANALYZE\b", re.IGNORECASE)


@dataclass(frozen=True)
class Branch:
    """One grouping set: its checked query and how its rows fill the statement's output columns."""

    grouping_set: GroupingSet
    query: Query
    layout: tuple[Slot, ...]


@dataclass(frozen=True)
class OrderKey:
    item: int  # index of the statement's output column
    descending: bool


@dataclass(frozen=True)
class Statement:
    """A checked statement: output column names, grouping-set branches, and the ordering of its rows."""

    sql: str
    names: tuple[str, ...]
    branches: tuple[Branch, ...]
    order_by: tuple[OrderKey, ...] = ()
    limit: int | None = None
    offset: int = 0

    @property
    def table(self) -> str:
        return self.branches[0].query.table


@dataclass(frozen=True)
class ParsedText:
    """The statement trees of one SQL text (parameters not yet bound) and whether it asked EXPLAIN."""

    explain: bool
    trees: tuple[exp.Expression, ...]
    texts: tuple[str, ...]  # each statement's SQL (the given text when there is one statement)


def parse_text(sql: object) -> ParsedText:
    """Parse ``sql`` once. Without EXPLAIN it must hold exactly one statement."""
    if not isinstance(sql, str):
        raise ProgrammingError(f"the operation must be a SQL string, got {type(sql).__name__}")
    explain = bool(_EXPLAIN.match(sql))
    body = _EXPLAIN.sub("", sql, count=1) if explain else sql
    if explain and _ANALYZE.match(body):
        raise ProgrammingError("EXPLAIN ANALYZE is not supported: it would run the statement; use EXPLAIN")
    try:
        trees = tuple(t for t in sqlglot.parse(body, read="duckdb") if t is not None)
    except SqlglotError as error:
        check_paramstyle(body)
        raise ProgrammingError(f"cannot parse SQL: {first_line(error)}; check the syntax there. {SUPPORTED}") from error
    except (RecursionError, ValueError, TypeError) as error:  # sqlglot's own limits on odd input
        raise ProgrammingError(f"cannot parse SQL: {type(error).__name__}; check the syntax. {SUPPORTED}") from error
    if not trees:
        what = "EXPLAIN needs a statement to explain, e.g. EXPLAIN SELECT COUNT(*) FROM t" if explain else "the SQL text holds no statement"
        raise ProgrammingError(what)
    if not explain and len(trees) != 1:
        raise ProgrammingError(
            f"expected exactly one SQL statement, got {len(trees)}: pass one statement per execute(), or a list to "
            "connection.workload()"
        )
    texts = (sql.strip(),) if len(trees) == 1 and not explain else tuple(t.sql(dialect="duckdb") for t in trees)
    return ParsedText(explain, trees, texts)


def bind_statement(tree: exp.Expression, parameters: Sequence[object] | None, sql: str) -> Statement:
    """Bind ``tree``'s parameters (on a copy: a parsed text can be bound many times) and check it."""
    bound = tree.copy()
    bind_parameters(bound, parameters)
    selects = _union_members(bound)
    names: tuple[str, ...] | None = None
    branches: list[Branch] = []
    for select in selects:
        if select is not bound:
            for arg in ("order", "limit", "offset"):
                if select.args.get(arg):
                    raise NotSupportedError(
                        f"UNION ALL: put ORDER BY / LIMIT / OFFSET after the last SELECT (they apply to all rows). {SUPPORTED}"
                    )
        member_names, member_branches = split_select(select)
        if names is None:
            names = member_names
        elif len(member_names) != len(names):
            raise ProgrammingError(
                f"UNION ALL: every SELECT must have the same number of columns ({len(names)} in the first, "
                f"{len(member_names)} in another)"
            )
        branches += [Branch(b.grouping_set, BranchChecker(b.select).query(), b.layout) for b in member_branches]
        if len(branches) > MAX_GROUPING_SETS:
            raise NotSupportedError(f"the statement expands to more than {MAX_GROUPING_SETS} grouping sets; use fewer")
    assert names is not None
    tables = {b.query.table.lower() for b in branches}
    if len(tables) > 1:
        raise NotSupportedError(
            f"UNION ALL: every SELECT must read the same table (one pass over its rows); got {sorted(tables)}"
        )
    order_by = _order_by(bound, selects[0], names, branches)
    return Statement(sql, names, tuple(branches), order_by, _row_count(bound, "limit"), _row_count(bound, "offset") or 0)


def parse_statement(sql: str, parameters: Sequence[object] | None = None) -> Statement:
    """One statement's text (no EXPLAIN), parsed once, bound and checked."""
    parsed = parse_text(sql)
    if parsed.explain:
        raise ProgrammingError("EXPLAIN is not a statement to run here; drop it, or use connection.explain()")
    return bind_statement(parsed.trees[0], parameters, parsed.texts[0])


def _union_members(tree: exp.Expression) -> list[exp.Select]:
    if isinstance(tree, exp.Union):
        if tree.args.get("distinct"):
            raise NotSupportedError(f"UNION (without ALL) is not supported: use UNION ALL. {SUPPORTED}")
        return _union_members(tree.this) + _union_members(tree.expression)
    if isinstance(tree, exp.SetOperation):
        raise NotSupportedError(f"{type(tree).__name__.upper()} is not supported; only UNION ALL combines SELECTs. {SUPPORTED}")
    if isinstance(tree, exp.Subquery):
        return _union_members(tree.this)
    if isinstance(tree, exp.Select):
        return [tree]
    if isinstance(tree, (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Merge)):
        kind = type(tree).__name__.upper()
        raise NotSupportedError(f"{kind} is not supported: dpsql only reads, through SELECT. {SUPPORTED}")
    raise ProgrammingError(f"cannot parse SQL: expected a SELECT statement, got {tree.sql(dialect='duckdb')[:60]!r}")


# ---------------------------------------------------------------------------------------------------
# ORDER BY / LIMIT / OFFSET of the whole statement.
# ---------------------------------------------------------------------------------------------------


def _order_by(tree: exp.Expression, first: exp.Select, names: tuple[str, ...], branches: list[Branch]) -> tuple[OrderKey, ...]:
    order = tree.args.get("order")
    if order is None:
        return ()
    texts = [(e.this if isinstance(e, exp.Alias) else e).sql(dialect="duckdb").lower() for e in first.expressions]
    keys = [_key_columns(b, names) for b in branches]
    return tuple(
        OrderKey(_order_target(ordered.this, names, texts, keys), bool(ordered.args.get("desc"))) for ordered in order.expressions
    )


def _key_columns(branch: Branch, names: tuple[str, ...]) -> dict[str, int]:
    """Lower-case column name → output position, for the group-key columns a branch shows."""
    found = {}
    for position, slot in enumerate(branch.layout):
        if not isinstance(slot, Constant):
            item = branch.query.select[slot]
            if isinstance(item, GroupKey):
                found[item.column.lower()] = position
    return found


def _order_target(node: exp.Expression, names: tuple[str, ...], texts: list[str], keys: list[dict[str, int]]) -> int:
    if isinstance(node, exp.Literal) and not node.is_string:
        position = int(str(node.this)) if str(node.this).isdigit() else 0
        if not 1 <= position <= len(names):
            raise ProgrammingError(f"ORDER BY {node.sql()}: position must be between 1 and {len(names)}")
        return position - 1
    if isinstance(node, exp.Column):
        if not node.table:
            for index, name in enumerate(names):
                if name.lower() == node.name.lower():
                    return index
        for found in keys:
            if node.name.lower() in found:
                return found[node.name.lower()]
    text = node.sql(dialect="duckdb").lower()
    if text in texts:
        return texts.index(text)
    raise NotSupportedError(
        f"ORDER BY {node.sql(dialect='duckdb')[:60]!r}: order by an output column, alias, COUNT or GROUPING() of the "
        f"SELECT list, or a position (ORDER BY is applied to the released rows). {SUPPORTED}"
    )


def _row_count(tree: exp.Expression, arg: str) -> int | None:
    node = tree.args.get(arg)
    if node is None:
        return None
    value = node.expression if isinstance(node, (exp.Limit, exp.Offset)) else node
    if isinstance(value, exp.Literal) and not value.is_string and str(value.this).isdigit():
        return int(str(value.this))
    clause = arg.upper()
    raise NotSupportedError(
        f"{clause} must be a non-negative integer literal, got {value.sql(dialect='duckdb')[:60]!r}; use e.g. {clause} 10"
    )

