"""The checked query of one grouping set, holding the parser to ``grammar/dpsql.ebnf``.

A statement's text is parsed once, by sqlglot (DuckDB dialect), in :mod:`dpsql.sql.statement`, which
binds its parameters and splits it into grouping sets; :class:`BranchChecker` walks the plain SELECT of
each grouping set and accepts exactly the subset the grammar states, returning a small IR
(:class:`Query`) independent of sqlglot. Anything else raises :class:`~dpsql.errors.NotSupportedError`
(valid SQL outside the grammar) or :class:`~dpsql.errors.ProgrammingError` (invalid SQL), naming the
clause at fault and saying what is supported. Parameters (``?``, PEP 249 ``qmark``) are bound by
:func:`bind_parameters`.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sqlglot import exp

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.sql.bounded_expressions import checked_argument
from dpsql.sql.derived import Derived, derived_column, is_derived
from dpsql.sql.dialect import BOUNDS_KEY, BOUNDS_NAME_KEY
from dpsql.sql.joins import MATCHED, JoinSpec, Source, column_qualifier, join_spec, semi_join, table_path

SUPPORTED = "(the SQL dpsql runs: docs/sql.md)"  # ends a refusal that names what to write instead

Literal = str | int | float | bool


# ---------------------------------------------------------------------------------------------
# The checked query: a small IR independent of sqlglot.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    column: str
    operator: str  # one of = <> < <= > >=
    value: Literal


@dataclass(frozen=True)
class InList:
    column: str
    values: tuple[Literal, ...]


@dataclass(frozen=True)
class Between:
    column: str
    low: Literal
    high: Literal


@dataclass(frozen=True)
class IsNull:
    column: str


@dataclass(frozen=True)
class Not:
    operand: Predicate


@dataclass(frozen=True)
class And:
    operands: tuple[Predicate, ...]


@dataclass(frozen=True)
class Or:
    operands: tuple[Predicate, ...]


Predicate = Comparison | InList | Between | IsNull | Not | And | Or


def predicate_columns(predicate: Predicate) -> tuple[str, ...]:
    """Columns a predicate mentions, in order of first appearance."""
    if isinstance(predicate, (And, Or)):
        found = [c for operand in predicate.operands for c in predicate_columns(operand)]
        return tuple(dict.fromkeys(found))
    if isinstance(predicate, Not):
        return predicate_columns(predicate.operand)
    return (predicate.column,)


@dataclass(frozen=True)
class GroupKey:
    """A GROUP BY column shown in the SELECT list."""

    name: str  # output name (alias or column)
    column: str


@dataclass(frozen=True)
class Count:
    """``COUNT(*)`` (column None) or ``COUNT(column)``; ``distinct``: ``COUNT(DISTINCT column)``, of the privacy
    unit only (``dpsql.sql.distinct_units``; the column is None once checked)."""

    name: str
    column: str | None
    distinct: bool = False


@dataclass(frozen=True)
class Aggregate:
    """``SUM``, ``AVG``, ``VAR_SAMP``, ``VAR_POP``, ``STDDEV_SAMP`` or ``STDDEV_POP`` of a column with
    declared bounds (``dpsql.sql.moments``): ``function`` is one of :data:`AGGREGATES`' values."""

    name: str
    function: str
    column: str
    bounds: tuple[float, float] | None = None  # the statement's own clamping bounds (Google's contribution_bounds_per_group)
    expression: bool = False  # ``column`` is the text of a bounded expression (``dpsql.sql.bounded_expressions``)


AGGREGATES: dict[type[exp.Expression], str] = {
    exp.Sum: "SUM",
    exp.Avg: "AVG",
    exp.Variance: "VAR_SAMP",
    exp.VariancePop: "VAR_POP",
    exp.Stddev: "STDDEV_SAMP",
    exp.StddevSamp: "STDDEV_SAMP",
    exp.StddevPop: "STDDEV_POP",
}


@dataclass(frozen=True)
class Quantile:
    """A quantile of a column with an ordered domain (``dpsql.sql.quantiles``): ``function`` is
    ``PERCENTILE_CONT`` (interpolating, as MEDIAN and QUANTILE_CONT), ``PERCENTILE_DISC`` (a value of the
    domain, as QUANTILE and QUANTILE_DISC), ``MIN`` or ``MAX`` (the 0 and 1 quantiles); ``fraction`` in [0, 1]."""

    name: str
    function: str
    column: str
    fraction: float


SelectItem = GroupKey | Count | Aggregate | Quantile
ItemParser = Callable[[exp.Expression, "str | None", Callable[[exp.Expression, str], str]], "SelectItem | None"]


@dataclass(frozen=True)
class Query:
    """One grouping set of a statement: ``SELECT <keys and counts> FROM table [WHERE] [GROUP BY]``.
    A GROUP BY entry is a column name or the key of one of ``derived`` (an expression over a column)."""

    table: str
    select: tuple[SelectItem, ...]
    group_by: tuple[str, ...]
    where: Predicate | None
    derived: tuple[Derived, ...] = ()
    join: JoinSpec | None = None  # the FROM clause's joins (``dpsql.sql.joins``): column names are then ``<source key>.<column>`` when qualified

    def group_sources(self) -> tuple[str, ...]:
        """The columns the GROUP BY entries read (a derived entry's source column)."""
        source = {d.key: d.source for d in self.derived}
        return tuple(dict.fromkeys(source.get(g, g) for g in self.group_by))

    def columns(self) -> tuple[str, ...]:
        """Every column the statement mentions, in order of first appearance."""
        found = list(self.group_sources())
        found += [item.column for item in self.select if not isinstance(item, GroupKey) and item.column is not None]
        if self.where is not None:
            found += predicate_columns(self.where)
        return tuple(dict.fromkeys(found))


# ---------------------------------------------------------------------------------------------
# Parsing.
# ---------------------------------------------------------------------------------------------

_CLAUSE_NAMES = {
    "joins": "JOIN",
    "having": "HAVING",
    "distinct": "SELECT DISTINCT",
    "with_": "WITH",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "laterals": "LATERAL",
    "sample": "TABLESAMPLE",
    "into": "SELECT INTO",
    "kind": "SELECT modifier",
    "hint": "optimizer hint",
    "settings": "SETTINGS",
    "locks": "FOR UPDATE",
    "prewhere": "PREWHERE",
    "connect": "CONNECT BY",
    "cluster": "CLUSTER BY",
    "distribute": "DISTRIBUTE BY",
    "sort": "SORT BY",
    "match": "MATCH_RECOGNIZE",
    "pivots": "PIVOT",
}
_ACCEPTED_ARGS = {"expressions", "from_", "where", "group", "joins"}
SAMPLING_REFUSED = (
    "TABLESAMPLE / USING SAMPLE is not supported: every statement counts all of the table's bounded rows and "
    f"sampling is not accounted for; remove the sampling clause (use a smaller epsilon for a cheaper, noisier answer) {SUPPORTED}"
)
_COMPARISONS: dict[type[exp.Expression], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


DEFAULT_SCHEMAS = ("main", "public")  # DuckDB's and PostgreSQL's: an unqualified registered table lives in either


def names_table(path: tuple[str, ...], registered: tuple[str, ...]) -> bool:
    """Whether a table name as written (``path``, lower case) names a table registered as ``registered``: its
    end (``t`` or ``s.t`` for ``db.s.t``), or the registered name under any catalog — an unqualified
    registration under a default schema (``main.t``, ``memory.main.t``, ``public.t``)."""
    if len(path) <= len(registered):
        return path == registered[len(registered) - len(path):]
    leading, rest = path[: len(path) - len(registered)], path[len(path) - len(registered):]
    return rest == registered and (len(registered) > 1 or leading[-1] in DEFAULT_SCHEMAS)


def first_line(error: Exception) -> str:
    """The first line of an error message (sqlglot's span several)."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


_OTHER_PARAMSTYLES = re.compile(r"%\(\w+\)s|%s|(?<![:\w]):\w+|\$\d+")  # pyformat, format, named/numeric, $n
_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")


def check_paramstyle(sql: str) -> None:
    """Say so when a statement that does not parse uses another driver's parameter style."""
    found = _OTHER_PARAMSTYLES.search(_QUOTED.sub("''", sql))
    if found:
        raise ProgrammingError(
            f"{found.group(0)!r} is a parameter placeholder of another paramstyle: dpsql's paramstyle is 'qmark', "
            "write ? for each parameter and pass a sequence of values"
        )


def _text_position(node: exp.Expression) -> tuple[tuple[int, int], ...]:
    """Where a node stands in the statement's text: sqlglot's argument order follows the clauses'
    order (WHERE before LIMIT), whereas its tree walk does not (it visits LIMIT first)."""
    path = []
    while node.parent is not None:
        clauses = list(type(node.parent).arg_types)
        path.append((clauses.index(node.arg_key) if node.arg_key in clauses else len(clauses), node.index or 0))
        node = node.parent
    return tuple(reversed(path))


def bind_parameters(statement: exp.Expression, parameters: Sequence[object] | None) -> None:
    """Replace the ``?`` placeholders of ``statement`` (in text order) by literals, in place."""
    placeholders = sorted((n for n in statement.walk() if isinstance(n, exp.Placeholder)), key=_text_position)
    given = () if parameters is None else parameters
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise ProgrammingError("parameters must be a sequence (paramstyle 'qmark': one value per '?')")
    if any(p.this for p in placeholders):
        raise ProgrammingError(
            "named or numbered parameters (:name, $1) are not supported: dpsql's paramstyle is 'qmark', "
            "write ? for each parameter and pass a sequence of values"
        )
    if len(placeholders) != len(given):
        raise ProgrammingError(f"the statement has {len(placeholders)} '?' placeholder(s) but {len(given)} parameter(s) were given")
    in_lists: dict[tuple[int, str], tuple[exp.Expression, dict[int, exp.Expression]]] = {}
    for placeholder, value in zip(placeholders, given):
        parent, key = placeholder.parent, placeholder.arg_key
        if parent is not None and isinstance(parent.args.get(key), list):  # set each list once: O(k), not O(k²)
            in_lists.setdefault((id(parent), key), (parent, {}))[1][placeholder.index] = _literal_node(value)
        else:
            placeholder.replace(_literal_node(value))
    for (_, key), (parent, literals) in in_lists.items():
        parent.set(key, [literals.get(position, node) for position, node in enumerate(parent.args[key])])


LIMIT_TARGET = "LIMIT"  # a placeholder bound to LIMIT or OFFSET: an integer
AGGREGATE_TARGET = "aggregate"  # a placeholder compared with an aggregate (HAVING): a number
_TARGET_COMPARISONS = (*_COMPARISONS, exp.Like, exp.ILike, exp.Is)


def placeholder_targets(statement: exp.Expression) -> tuple[str | None, ...]:
    """For each ``?`` of ``statement`` (text order), what it is bound to: the name of the column it is
    compared with (``=``, ``<>``, ``<``, ``IN``, ``BETWEEN``, ``LIKE``), :data:`LIMIT_TARGET`,
    :data:`AGGREGATE_TARGET`, or None (anything else). Its type follows: a driver that describes a
    statement before binding it is told the column's type, and text it sends is read as that type."""
    placeholders = sorted((n for n in statement.walk() if isinstance(n, exp.Placeholder)), key=_text_position)
    return tuple(_target(p) for p in placeholders)


def _target(placeholder: exp.Expression) -> str | None:
    node, parent = placeholder, placeholder.parent
    while isinstance(parent, (exp.Paren, exp.Cast, exp.Neg)):
        node, parent = parent, parent.parent
    if isinstance(parent, (exp.Limit, exp.Offset, exp.Fetch)):
        return LIMIT_TARGET
    if isinstance(parent, (exp.In, exp.Between)) and node is not parent.this:
        other: exp.Expression | None = parent.this
    elif isinstance(parent, _TARGET_COMPARISONS):
        other = parent.expression if node is parent.this else parent.this
    else:
        return None
    while isinstance(other, exp.Paren):
        other = other.this
    if isinstance(other, exp.Column):
        return other.name
    if isinstance(other, (exp.AggFunc, exp.Count)):
        return AGGREGATE_TARGET
    return None


def _literal_node(value: object) -> exp.Expression:
    """A parameter as a SQL literal: numpy scalars as their Python values, ``Decimal`` as a number,
    ``date``/``datetime``/``time`` as their ISO-8601 text (compare with categories written that way)."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float, decimal.Decimal)):
        if not math.isfinite(value):
            raise ProgrammingError(f"a parameter must be a finite number, got {value!r}")
        node = exp.Literal.number(abs(value))
        return exp.Neg(this=node) if value < 0 else node
    if isinstance(value, datetime.datetime):
        return exp.Literal.string(value.isoformat(sep=" "))
    if isinstance(value, (datetime.date, datetime.time)):
        return exp.Literal.string(value.isoformat())
    if isinstance(value, str):
        return exp.Literal.string(value)
    raise ProgrammingError(
        f"unsupported parameter type {type(value).__name__}; use str, int, float, bool, None, a numpy scalar, "
        "Decimal, or a date/datetime/time (bound as ISO-8601 text)"
    )


def count_argument(node: exp.Count, column: Callable[[exp.Expression, str], str]) -> str | None:
    """The counted column of ``COUNT(...)``: None for ``*`` and numeric literals, else ``column(node)``."""
    argument = node.this
    if argument is None:
        raise ProgrammingError(f"COUNT() needs an argument: COUNT(*) or COUNT(column). {SUPPORTED}")
    if isinstance(argument, exp.Star):
        return None
    if isinstance(argument, exp.Distinct):
        if len(argument.expressions) != 1:
            raise NotSupportedError(f"SELECT: COUNT(DISTINCT ...) takes one column, the privacy unit. {SUPPORTED}")
        return column(argument.expressions[0], "SELECT COUNT(DISTINCT ...)")
    if isinstance(argument, exp.Literal) and not argument.is_string:
        return None  # COUNT(1) counts rows, like COUNT(*)
    return column(argument, "SELECT COUNT")


def refuse_select_item(node: exp.Expression) -> None:
    """Refuse a SELECT item (alias removed) of a kind the grammar has no place for."""
    if isinstance(node, exp.Star):
        raise NotSupportedError(f"SELECT * is not supported: list group columns and COUNT(*). {SUPPORTED}")
    if isinstance(node, exp.Window):
        raise NotSupportedError(f"SELECT: a window function over private rows is not supported; apply it to aggregates, e.g. SUM(COUNT(*)) OVER (). {SUPPORTED}")
    if isinstance(node, exp.AggFunc) and not isinstance(node, exp.Count) and type(node) not in AGGREGATES and type(node) not in QUANTILE_FUNCTIONS:
        name = node.sql_name() if hasattr(node, "sql_name") else type(node).__name__.upper()
        raise NotSupportedError(f"SELECT: the aggregate {name}(...) is not supported; use COUNT, SUM, AVG, VARIANCE, STDDEV, MEDIAN, PERCENTILE_CONT, QUANTILE_CONT, APPROX_QUANTILE, MIN or MAX. {SUPPORTED}")


def aggregate_argument(node: exp.Expression, column: Callable[[exp.Expression, str], str]) -> tuple[str, bool]:
    """The argument of ``SUM(column)``, ``AVG(column)``, …: a plain column's name, or the text of an expression whose
    bounds follow from the columns' (``dpsql.sql.bounded_expressions``); and whether it is an expression."""
    function = AGGREGATES[type(node)]
    if isinstance(node.this, exp.Distinct):
        raise NotSupportedError(f"SELECT: {function}(DISTINCT ...) is not supported; use {function}(column). {SUPPORTED}")
    if node.this is None or isinstance(node.this, exp.Star):
        raise ProgrammingError(f"{function}() needs a column argument: {function}(column). {SUPPORTED}")
    if isinstance(node.this, exp.Column):
        return column(node.this, f"SELECT {function}"), False
    return checked_argument(node.this, column, function), True


def contribution_bounds(node: exp.Expression) -> tuple[float, float] | None:
    """An aggregate's ``contribution_bounds_per_group => (lo, hi)`` (Google's DP SQL), checked: two numbers,
    ``lo < hi`` (``lo <= hi`` and ``lo >= 0`` for a count)."""
    given = node.meta.get(BOUNDS_KEY)
    if given is None:
        return None
    name, written = type(node).__name__.upper(), node.meta.get(BOUNDS_NAME_KEY, BOUNDS_KEY)
    pair = given.expressions if isinstance(given, exp.Tuple) else []
    numbers = [BranchChecker._literal(v, f"{name}(..., {written})") if isinstance(v, (exp.Literal, exp.Neg)) else None for v in pair]
    if len(numbers) != 2 or not all(isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) for n in numbers):
        raise ProgrammingError(f"{name}: {written} must be two numbers, e.g. {written} => (0, 100)")
    low, high = float(numbers[0]), float(numbers[1])  # type: ignore[arg-type]
    if isinstance(node, exp.Count):
        if not 0 <= low <= high:
            raise ProgrammingError(f"COUNT: {written} must satisfy 0 <= lo <= hi, got ({numbers[0]}, {numbers[1]})")
        return None
    if not low < high:
        raise ProgrammingError(f"{name}: {written} must satisfy lo < hi, got ({numbers[0]}, {numbers[1]})")
    return (low, high)


QUANTILE_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.Median: "PERCENTILE_CONT",
    exp.PercentileCont: "PERCENTILE_CONT",
    exp.PercentileDisc: "PERCENTILE_DISC",
    exp.Quantile: "PERCENTILE_DISC",
    exp.ApproxQuantile: "APPROX_QUANTILE",  # answered as PERCENTILE_DISC: a value of the column (a DP answer is an estimate anyway)
    exp.Min: "MIN",
    exp.Max: "MAX",
}


def quantile_item(node: exp.Expression, name: str | None, column: Callable[[exp.Expression, str], str]) -> Quantile | None:
    """The quantile a SELECT item asks for (None when it is no quantile): ``MEDIAN(c)``, ``MIN(c)``,
    ``MAX(c)``, ``QUANTILE_CONT(c, q)``, ``QUANTILE_DISC(c, q)``, ``QUANTILE(c, q)`` or
    ``PERCENTILE_CONT(q) / PERCENTILE_DISC(q) WITHIN GROUP (ORDER BY c)``."""
    shown = name or node.sql(dialect="duckdb")
    if isinstance(node, exp.WithinGroup):
        function = QUANTILE_FUNCTIONS.get(type(node.this))
        order = node.expression
        if function not in ("PERCENTILE_CONT", "PERCENTILE_DISC") or not isinstance(order, exp.Order) or len(order.expressions) != 1:
            raise NotSupportedError(f"SELECT: {node.sql(dialect='duckdb')[:60]!r} is not supported; write PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY column). {SUPPORTED}")
        ordered = order.expressions[0]
        if ordered.args.get("desc"):
            raise NotSupportedError(f"SELECT {function}: WITHIN GROUP (ORDER BY ... DESC) is not supported; ask for the 1 − q quantile in ascending order")
        return Quantile(shown, function, column(ordered.this, f"SELECT {function}"), _fraction(node.this.this, function))
    function = QUANTILE_FUNCTIONS.get(type(node))
    if function is None:
        return None
    if BOUNDS_KEY in node.meta:
        raise NotSupportedError(
            f"SELECT {function}: {node.meta.get(BOUNDS_NAME_KEY, BOUNDS_KEY)} is not supported on quantiles, which rank the values over "
            "the column's declared range or bins (rows outside them are dropped, not clamped); drop the argument"
        )
    if isinstance(node.this, exp.Distinct) or node.this is None or isinstance(node.this, exp.Star):
        raise NotSupportedError(f"SELECT {function}: give one column, e.g. {function}(age). {SUPPORTED}")
    if isinstance(node, (exp.Min, exp.Max, exp.Median)) and any(v for k, v in node.args.items() if k != "this"):
        raise NotSupportedError(f"SELECT {function}: give one column and nothing else, e.g. {type(node).__name__.upper()}(age). {SUPPORTED}")
    if isinstance(node, (exp.Min, exp.Max)):
        return Quantile(shown, function, column(node.this, f"SELECT {function}"), 0.0 if function == "MIN" else 1.0)
    if isinstance(node, exp.Median):
        return Quantile(shown, function, column(node.this, "SELECT MEDIAN"), 0.5)
    accuracy = node.args.get("accuracy")
    if isinstance(node, exp.ApproxQuantile) and (
        any(node.args.get(a) is not None for a in ("weight", "error_tolerance")) or not (accuracy is None or isinstance(accuracy, exp.Literal))
    ):
        raise NotSupportedError(f"SELECT {function}: give the column and the fraction only, e.g. APPROX_QUANTILE(age, 0.9) (an accuracy is ignored: ε sets it)")
    fraction = node.args.get("quantile") if isinstance(node, exp.Quantile) else node.expression
    if fraction is None:
        raise ProgrammingError(f"SELECT {function}: give the column and the fraction, e.g. QUANTILE_CONT(age, 0.9)")
    return Quantile(shown, function, column(node.this, f"SELECT {function}"), _fraction(fraction, function))


def _fraction(node: exp.Expression, function: str) -> float:
    """The fraction of a quantile: a number literal in [0, 1]."""
    if isinstance(node, exp.Array):
        raise NotSupportedError(f"SELECT {function}: a list of fractions is not supported; write one quantile per fraction (they share one measurement)")
    value = BranchChecker._literal(node, f"SELECT {function}") if isinstance(node, (exp.Literal, exp.Neg, exp.Paren)) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ProgrammingError(f"SELECT {function}: the fraction must be a number between 0 and 1, got {node.sql(dialect='duckdb')[:40]!r}")
    return float(value)


class BranchChecker:
    """Walks the plain SELECT of one grouping set (parameters bound, no ORDER BY / LIMIT: those belong
    to the whole statement) and accepts the grammar's subset, returning its :class:`Query`."""

    def __init__(self, select: exp.Expression, parse_item: ItemParser) -> None:
        self.statement = select
        self.parse_item = parse_item  # a SELECT item read by its aggregate kind (``dpsql.sql.kinds.parse_item``)
        self.table = ""
        self.path: tuple[str, ...] = ()  # the FROM table's qualified name, lower case
        self.qualifiers: set[str] = set()
        self.derived: dict[str, Derived] = {}  # by key
        self.join: JoinSpec | None = None  # the FROM clause's joins, semi-joins of IN (SELECT …) appended

    def query(self) -> Query:
        select = self._require_select()
        for arg, value in select.args.items():
            if arg == "sample" and value:
                raise NotSupportedError(SAMPLING_REFUSED)
            if value and arg not in _ACCEPTED_ARGS:
                clause = _CLAUSE_NAMES.get(arg, arg.upper())
                raise NotSupportedError(f"{clause} is not supported inside an aggregation of a private table; apply it to the released rows in an outer SELECT. {SUPPORTED}")
        self.table = self._from_clause(select)
        group_by = self._group_by(select)
        items = tuple(self._select_item(e) for e in select.expressions)
        for item in items:
            if isinstance(item, GroupKey) and item.column not in group_by:
                raise ProgrammingError(
                    f"SELECT: column {item.column!r} must appear in the GROUP BY clause (or inside COUNT)"
                )
        where = select.args.get("where")
        predicate = self._predicate(where.this) if where is not None else None
        if self.join is not None:
            self.table = self.join.describe()
        return Query(table=self.table, select=items, group_by=group_by, where=predicate, derived=tuple(self.derived.values()), join=self.join)

    # -- statement and FROM ----------------------------------------------------------------------
    def _require_select(self) -> exp.Select:
        statement = self.statement
        if isinstance(statement, exp.Select):
            return statement
        if isinstance(statement, exp.SetOperation):
            kind = type(statement).__name__.upper()
            raise NotSupportedError(f"{kind} is not supported: send one SELECT per statement. {SUPPORTED}")
        if isinstance(statement, (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Merge)):
            kind = type(statement).__name__.upper()
            raise NotSupportedError(f"{kind} is not supported: dpsql only reads; write a SELECT. {SUPPORTED}")
        if isinstance(statement, exp.Subquery):
            raise NotSupportedError(f"a parenthesised query is not supported at the top level; write it without the parentheses. {SUPPORTED}")
        raise ProgrammingError(f"cannot parse SQL: expected a SELECT statement, got {statement.sql(dialect='duckdb')[:60]!r}")

    def _from_clause(self, select: exp.Select) -> str:
        source = select.args.get("from_")
        if source is None:
            raise ProgrammingError(f"FROM is missing: name the registered table to query. {SUPPORTED}")
        table = source.this
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
            raise NotSupportedError(f"FROM must name one registered table, not {table.sql(dialect='duckdb')[:60]!r}. {SUPPORTED}")
        if table.args.get("laterals"):
            raise NotSupportedError(f"LATERAL is not supported in a private aggregation; see {SUPPORTED}")
        joined = [join.this for join in select.args.get("joins") or ()]
        if any(isinstance(source, exp.Table) and source.args.get("sample") for source in (table, *joined)):
            raise NotSupportedError(SAMPLING_REFUSED)
        path = table_path(table)
        self.path = tuple(part.lower() for part in path)
        self.qualifiers = {self.path[-1]}
        if table.alias:
            self.qualifiers.add(table.alias.lower())
        if select.args.get("joins"):
            self.join = join_spec(select, table)
            self.qualifiers = {source.key for source in self.join.sources}
        return ".".join(path)

    def _semi_join(self, node: exp.In) -> Predicate:
        """``column IN (SELECT key FROM public WHERE …)``: a semi-join source (``dpsql.sql.joins``) and the predicate
        that its ``matched`` column is TRUE."""
        column = self._column(node.this, "WHERE")
        first = self.join.first if self.join is not None else Source(self.path[-1] if not self.qualifiers - {self.path[-1]} else sorted(self.qualifiers - {self.path[-1]})[0], self.table)
        joins = self.join.joins if self.join is not None else ()
        key, name = column.rsplit(".", 1) if self.join is not None and "." in column else (None, column)
        semi = semi_join(node, (key if key is not None else (first.key if self.join is None else None), name), 1 + sum(j.kind == "semi" for j in joins))
        self.join = JoinSpec(first, (*joins, semi))
        self.qualifiers |= {first.key}
        return Comparison(f"{semi.source.key}.{MATCHED}", "=", True)

    def _column(self, node: exp.Expression, clause: str) -> str:
        """The name of a plain column reference, checking any qualifier (the table's alias, its name, or the
        end of its qualified name: ``t.age``, ``public.t.age``)."""
        if isinstance(node, exp.Filter):  # the FILTERs of COUNT, SUM, AVG and the variances are CASEs (dpsql.sql.dialect)
            raise NotSupportedError(
                f"{clause}: {node.sql(dialect='duckdb')[:60]!r}: FILTER (WHERE …) is supported on COUNT(*), COUNT(x), SUM, AVG, "
                f"VARIANCE and STDDEV; for this aggregate put the condition in the statement's WHERE instead. {SUPPORTED}"
            )
        if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
            raise NotSupportedError(
                f"{clause}: {node.sql(dialect='duckdb')[:60]!r} is not a plain column; write the aggregate of a column and "
                f"compute on its result, e.g. SUM(age) + COUNT(*) for SUM(age + 1). {SUPPORTED}"
            )
        qualifier = tuple(part.lower() for part in column_qualifier(node))
        if self.join is not None:
            if not qualifier:
                return node.name
            if len(qualifier) != 1 or qualifier[0] not in self.qualifiers:
                raise ProgrammingError(f"{clause}: {'.'.join(column_qualifier(node))!r} is not one of the tables or aliases in FROM {sorted(self.qualifiers)}; use one of them")
            return f"{qualifier[0]}.{node.name}"
        if qualifier and not (qualifier == self.path[-len(qualifier):] or (len(qualifier) == 1 and qualifier[0] in self.qualifiers)):
            raise ProgrammingError(f"{clause}: {'.'.join(column_qualifier(node))!r} is not the table or its alias in FROM; use the table's name or alias")
        return node.name

    # -- SELECT and GROUP BY ---------------------------------------------------------------------
    def _select_item(self, node: exp.Expression) -> SelectItem:
        alias = None
        if isinstance(node, exp.Alias):
            alias = node.alias
            node = node.this
        refuse_select_item(node)
        item = self.parse_item(node, alias, self._column)
        if item is not None:
            return item
        if is_derived(node):
            key = self._derived(node)
            return GroupKey(alias or node.sql(dialect="duckdb"), key)
        column = self._column(node, "SELECT")
        return GroupKey(alias or node.name, column)

    def _derived(self, node: exp.Expression) -> str:
        """Check a derived group column (``dpsql.sql.derived``) and return its key."""
        derived = derived_column(node, self, predicate_columns)
        self.derived.setdefault(derived.key, derived)
        return derived.key

    def _group_by(self, select: exp.Select) -> tuple[str, ...]:
        group = select.args.get("group")
        if group is None:
            return ()
        for arg in ("grouping_sets", "cube", "rollup", "totals", "all"):
            if group.args.get(arg):
                raise NotSupportedError(f"GROUP BY {arg.upper().replace('_', ' ')} is not supported: list plain columns. {SUPPORTED}")
        columns = []
        for node in group.expressions:
            if isinstance(node, (exp.Rollup, exp.Cube, exp.GroupingSets)):
                raise NotSupportedError(f"GROUP BY {type(node).__name__.upper()} is not supported: list plain columns. {SUPPORTED}")
            columns.append(self._derived(node) if is_derived(node) else self._column(node, "GROUP BY"))
        return tuple(dict.fromkeys(columns))

    # -- WHERE -------------------------------------------------------------------------------------
    def _predicate(self, node: exp.Expression) -> Predicate:
        if isinstance(node, exp.Paren):
            return self._predicate(node.this)
        if isinstance(node, exp.Column):  # a BOOLEAN column on its own: WHERE paid means paid = TRUE
            return Comparison(self._column(node, "WHERE"), "=", True)
        if isinstance(node, (exp.And, exp.Or)):
            operands = tuple(self._predicate(part) for part in node.flatten())
            return And(operands) if isinstance(node, exp.And) else Or(operands)
        if isinstance(node, exp.Not):
            return Not(self._predicate(node.this))
        if type(node) in _COMPARISONS:
            return self._comparison(node, _COMPARISONS[type(node)])
        if isinstance(node, exp.In):
            if node.args.get("query") and not node.args.get("unnest") and not node.args.get("field"):
                return self._semi_join(node)
            if node.args.get("unnest") or node.args.get("field"):
                raise NotSupportedError(f"WHERE: IN (UNNEST …) is not supported; list literal values. {SUPPORTED}")
            column = self._column(node.this, "WHERE")
            values = tuple(self._literal(v, f"WHERE {column} IN") for v in node.expressions)
            if any(v is None for v in values):
                raise ProgrammingError(f"WHERE {column} IN (...): NULL in an IN list never matches; use {column} IS NULL")
            return InList(column, values)  # type: ignore[arg-type]
        if isinstance(node, exp.Between):
            column = self._column(node.this, "WHERE")
            low = self._literal(node.args["low"], f"WHERE {column} BETWEEN")
            high = self._literal(node.args["high"], f"WHERE {column} BETWEEN")
            if low is None or high is None:
                raise ProgrammingError(f"WHERE {column} BETWEEN: bounds must not be NULL")
            return Between(column, low, high)
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise NotSupportedError(f"WHERE: IS {node.expression.sql()} is not supported; write = {node.expression.sql()} or IS [NOT] NULL. {SUPPORTED}")
            return IsNull(self._column(node.this, "WHERE"))
        raise NotSupportedError(
            f"WHERE: {node.sql(dialect='duckdb')[:60]!r} is not supported; use comparisons (= <> < <= > >=) of a "
            f"column with a literal, IN, BETWEEN, IS [NOT] NULL, AND, OR, NOT. {SUPPORTED}"
        )

    def _comparison(self, node: exp.Expression, operator: str) -> Comparison:
        left, right = node.this, node.expression
        if isinstance(left, exp.Column) and not isinstance(right, exp.Column):
            column, literal = left, right
        elif isinstance(right, exp.Column) and not isinstance(left, exp.Column):
            column, literal, operator = right, left, _FLIPPED[operator]
        else:
            raise NotSupportedError(
                f"WHERE: {node.sql(dialect='duckdb')[:60]!r} must compare one column with one literal; write e.g. age > 30 "
                f"(a condition on released values goes in HAVING or an outer WHERE). {SUPPORTED}"
            )
        name = self._column(column, "WHERE")
        value = self._literal(literal, f"WHERE {name} {operator}")
        if value is None:
            raise ProgrammingError(f"WHERE {name} {operator} NULL is never true; use {name} IS NULL or IS NOT NULL")
        return Comparison(name, operator, value)

    @staticmethod
    def _literal(node: exp.Expression, clause: str) -> Literal | None:
        if isinstance(node, exp.Paren):
            return BranchChecker._literal(node.this, clause)
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Boolean):
            return bool(node.this)
        negative = isinstance(node, exp.Neg)
        inner = node.this if negative else node
        if isinstance(inner, exp.Literal):
            if inner.is_string:
                if negative:
                    raise ProgrammingError(f"{clause}: cannot negate the string {inner.this!r}")
                return str(inner.this)
            text = str(inner.this)
            try:
                number: int | float = int(text)
            except ValueError:
                number = float(text)
            return -number if negative else number
        raise NotSupportedError(f"{clause}: {node.sql(dialect='duckdb')[:60]!r} is not a literal; compare with a number or a string. {SUPPORTED}")
