"""SQL text → checked :class:`Statement` s: the text is parsed ONCE, then bound and split.

``parse_text`` hands the text to sqlglot (DuckDB dialect) once; a leading ``EXPLAIN`` marks the text as
a request for the plan (several ``;``-separated statements may follow it). ``bind_statement`` binds one
statement tree's ``?`` parameters (PEP 249 ``qmark``) and splits it into grouping-set branches — the
SELECTs of a ``UNION ALL`` concatenated, GROUPING SETS / CUBE / ROLLUP expanded (``dpsql.sql.grouping``)
— each checked into a :class:`~dpsql.sql.parse.Query`. ORDER BY / LIMIT / OFFSET belong to the whole
statement and HAVING to its SELECT's branches; all apply to the released rows (post-processing,
:mod:`dpsql.sql.having`). An aggregate that HAVING or ORDER BY uses but the SELECT list does not show is
appended to every SELECT as a hidden output column: measured and priced with the rest, never shown.
A plain ``SELECT … GROUP BY a, b`` is the statement with one branch.

>>> statement = parse_statement("SELECT sex, COUNT(*) AS n FROM adult WHERE age > ? GROUP BY sex", (30,))
>>> branch = statement.branches[0]
>>> branch.query.group_by, branch.query.where
(('sex',), Comparison(column='age', operator='>', value=30))
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import SqlglotError

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.sql import dialect, kinds
from dpsql.sql.grouping import MAX_GROUPING_SETS, Constant, GroupingSet, Slot, split_select
from dpsql.sql.having import Condition, aggregates, having_condition, is_aggregate
from dpsql.sql.parse import SUPPORTED, BranchChecker, GroupKey, Query, bind_parameters, check_paramstyle, first_line
from dpsql.sql.settings import TextCost, cost_comment, google_options

_EXPLAIN = re.compile(r"^\s*EXPLAIN\b", re.IGNORECASE)
_ANALYZE = re.compile(r"^\s*ANALYZE\b", re.IGNORECASE)


@dataclass(frozen=True)
class Branch:
    """One grouping set: its checked query and how its rows fill the statement's output columns."""

    grouping_set: GroupingSet
    query: Query
    layout: tuple[Slot, ...]  # per output column, the hidden ones (after ``Statement.names``) included
    having: Condition | None = None  # over output columns, applied to the released rows


@dataclass(frozen=True)
class OrderKey:
    item: int  # index of the statement's output column
    descending: bool
    nulls_first: bool = False  # DuckDB's default in both directions; NULLS FIRST / NULLS LAST as written


@dataclass(frozen=True)
class Statement:
    """A checked statement: output column names (hidden aggregates, used by HAVING / ORDER BY, follow
    them in each branch's layout), grouping-set branches, and the ordering of its rows."""

    sql: str
    names: tuple[str, ...]
    branches: tuple[Branch, ...]
    order_by: tuple[OrderKey, ...] = ()
    limit: int | None = None
    offset: int = 0
    cost: TextCost = TextCost()  # what its text says it costs (``dpsql.sql.settings``)
    checks: tuple[tuple[str, str], ...] = ()  # Google's options prepare checks against the schema

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
        trees = tuple(t for t in dialect.parse(body) if t is not None)
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
    texts = (sql.strip(),) if len(trees) == 1 and not explain else tuple(t.sql(dialect=dialect.Dpsql) for t in trees)
    return ParsedText(explain, trees, texts)


def bind_statement(tree: exp.Expression, parameters: Sequence[object] | None, sql: str) -> Statement:
    """Bind ``tree``'s parameters (on a copy: a parsed text can be bound many times) and check it."""
    bound = tree.copy()
    bind_parameters(bound, parameters)
    cost, checks = statement_cost(bound, sql)
    return check_statement(bound, sql, cost, checks)


def check_statement(bound: exp.Expression, sql: str, cost: TextCost, checks: tuple[tuple[str, str], ...]) -> Statement:
    """Check a statement tree whose parameters are bound (it is changed in place) as one private core."""
    selects = _union_members(bound)
    havings = [select.args.get("having") for select in selects]
    for select in selects:
        select.set("having", None)
    hidden = _hidden_aggregates(bound, selects, havings)
    for select in selects:
        select.set("expressions", [*select.expressions, *(h.copy() for h in hidden)])
    names: tuple[str, ...] | None = None
    branches: list[Branch] = []
    for select, having in zip(selects, havings):
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
                f"UNION ALL: every SELECT must have the same number of columns ({len(names) - len(hidden)} in the first, "
                f"{len(member_names) - len(hidden)} in another)"
            )
        condition = None if having is None else having_condition(having.this, lambda n, s=select: _output_position(n, s, len(hidden)))
        branches += [Branch(b.grouping_set, BranchChecker(b.select, kinds.parse_item).query(), b.layout, condition) for b in member_branches]
        if len(branches) > MAX_GROUPING_SETS:
            raise NotSupportedError(f"the statement expands to more than {MAX_GROUPING_SETS} grouping sets; use fewer")
    assert names is not None
    if not any(select.args.get("group") for select in selects) and not any(kinds.measured(i) for b in branches for i in b.query.select):
        raise NotSupportedError(f"SELECT must contain an aggregate (COUNT(*), SUM, AVG, …) or GROUP BY columns; add COUNT(*). {SUPPORTED}")
    tables = {b.query.table.lower() for b in branches}
    if len(tables) > 1:
        raise NotSupportedError(
            f"UNION ALL: every SELECT must read the same table (one pass over its rows); got {sorted(tables)}"
        )
    names = names[: len(names) - len(hidden)]
    order_by = _order_by(bound, selects[0], names, branches)
    return Statement(sql, names, tuple(branches), order_by, _row_count(bound, "limit"), _row_count(bound, "offset") or 0, cost, checks)


def statement_cost(tree: exp.Expression, sql: str) -> tuple[TextCost, tuple[tuple[str, str], ...]]:
    """What a statement's text says it costs — its ``/* dpsql: … */`` comment or Google's ``WITH
    DIFFERENTIAL_PRIVACY OPTIONS(…)``, taken off ``tree`` — and the options to check against the schema."""
    found = [options for options in (dialect.dp_options(select) for select in tree.find_all(exp.Select)) if options]
    if len(found) > 1:
        raise ProgrammingError("WITH DIFFERENTIAL_PRIVACY OPTIONS(...) is given more than once: give it once, after the first SELECT")
    comment = TextCost.from_values(cost_comment(sql), "the dpsql comment")
    if not found:
        return comment, ()
    google, checks = google_options(found[0])
    if comment.given and google.given and (comment.epsilon, comment.rho) != (google.epsilon, None):
        raise ProgrammingError("the statement gives its cost twice (a dpsql comment and DIFFERENTIAL_PRIVACY OPTIONS): give it once")
    return google.before(comment), checks


def parse_statement(sql: str, parameters: Sequence[object] | None = None) -> Statement:
    """One statement's text (no EXPLAIN), parsed once, bound and checked."""
    parsed = parse_text(sql)
    if parsed.explain:
        raise ProgrammingError("EXPLAIN is not a statement to run here; drop it, or use connection.explain()")
    return bind_statement(parsed.trees[0], parameters, parsed.texts[0])


def _text(node: exp.Expression) -> str:
    return (node.this if isinstance(node, exp.Alias) else node).sql(dialect="duckdb").lower()


def _hidden_aggregates(tree: exp.Expression, selects: list[exp.Select], havings: list[exp.Expression | None]) -> list[exp.Expression]:
    """Aggregates HAVING or ORDER BY use that the SELECT list does not show (by SQL text, once each)."""
    needed: dict[str, exp.Expression] = {}
    for select, having in zip(selects, havings):
        shown = {_text(e) for e in select.expressions}
        for node in aggregates(having.this) if having is not None else []:
            if _text(node) not in shown:
                needed.setdefault(_text(node), node)
    order = tree.args.get("order")
    shown = {_text(e) for e in selects[0].expressions}
    for ordered in order.expressions if order is not None else []:
        if is_aggregate(ordered.this) and _text(ordered.this) not in shown:
            needed.setdefault(_text(ordered.this), ordered.this)
    return list(needed.values())


def _output_position(node: exp.Expression, select: exp.Select, hidden: int) -> int | None:
    """The output column of an aggregate (by SQL text) or of the alias of a shown aggregate, in ``select``."""
    items = select.expressions
    if is_aggregate(node):
        texts = [_text(e) for e in items]
        return texts.index(_text(node)) if _text(node) in texts else None
    if isinstance(node, exp.Column) and not node.table:
        for position, item in enumerate(items[: len(items) - hidden]):
            if isinstance(item, exp.Alias) and item.alias.lower() == node.name.lower() and is_aggregate(item.this):
                return position
    return None


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
        raise NotSupportedError(f"{kind} is not supported: dpsql only reads; write a SELECT. {SUPPORTED}")
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
        OrderKey(_order_target(ordered.this, names, texts, keys), bool(ordered.args.get("desc")), bool(ordered.args.get("nulls_first")))
        for ordered in order.expressions
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

