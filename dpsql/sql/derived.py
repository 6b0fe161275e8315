"""Derived GROUP BY columns: an expression over ONE declared column, compiled to a public map.

``CASE WHEN <conditions on one column> THEN <literal> … [ELSE <literal>] END``, integer arithmetic
(``age / 10``, ``age // 10``, ``age - age % 10``, ``floor(age / 10)``, ``+ - *``, ``ceil``) and the date
functions ``date_trunc`` / ``extract`` / ``date_part`` / ``year()``, ``month()``, … and ``CAST(c AS DATE)`` on a
declared range of days (a DATE column, or a TIMESTAMP column whose cells are days) are accepted as group keys;
parts finer than a day are refused. Each is evaluated here on the *declared* cells of its source column —
from the schema only, never on the data — giving a :class:`DerivedMap`: the derived values (the cells
a result row shows, in order of first appearance over the source's cells, NULL last) and the derived
cell of every source cell. The derived column is then an attribute of the workload with its own few
cells; the engine reads counts over the source column and sums them through the map before any noise
(``dpsql.workloads``), so grouping by a derived column is priced and answered like grouping by a
declared column with those values.

The values follow DuckDB's semantics exactly: ``/`` is floating-point division (``17 / 10 = 1.7``),
``//`` integer division truncating toward zero, ``%`` the remainder with the sign of the dividend,
``floor``/``ceil`` return doubles, ``date_trunc`` on a DATE returns a TIMESTAMP, ``extract`` an integer,
``CAST(c AS DATE)`` the day (a DATE: on a TIMESTAMP column declared as a range of days, its cells' days),
a NULL operand gives NULL and a CASE condition that is NULL (UNKNOWN) falls through to the next branch.
Forms DuckDB would type differently from what can be reproduced exactly (decimal literals, mixed THEN
types) are refused with :class:`~dpsql.errors.NotSupportedError` saying what is accepted.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
from sqlglot import exp

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.schema import ColumnDomain

if TYPE_CHECKING:
    from dpsql.sql.parse import Predicate

ACCEPTED = (
    "Write a derived group column as CASE WHEN on one column, integer arithmetic on an integer column or a date part "
    "of a date column, or GROUP BY the column and compute the expression in the SELECT list (docs/sql.md#derived-group-columns)"
)
INT64 = 1 << 63
MAX_DERIVED_CELLS = 1 << 20  # the most distinct values a derived column may take


# ---------------------------------------------------------------------------------------------
# The IR: independent of sqlglot.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """The source column's value."""


@dataclass(frozen=True)
class Number:
    value: int


@dataclass(frozen=True)
class Binary:
    operator: str  # + - * / // %
    left: Expression
    right: Expression


@dataclass(frozen=True)
class Function:
    name: str  # neg, floor, ceil, trunc:<part>, extract:<part>, day_of (CAST(… AS DATE))
    argument: Expression


@dataclass(frozen=True)
class CaseWhen:
    branches: tuple[tuple[Predicate, object], ...]  # (condition on the source, THEN literal or None)
    default: object  # ELSE literal, None for NULL


Expression = Source | Number | Binary | Function | CaseWhen


@dataclass(frozen=True)
class Derived:
    """A derived group column: ``key`` names it in ``Query.group_by`` (its SQL text), ``source`` is
    the one column it reads."""

    key: str
    source: str
    expression: Expression


# ---------------------------------------------------------------------------------------------
# sqlglot → IR.
# ---------------------------------------------------------------------------------------------

_BINARY: dict[type[exp.Expression], str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.IntDiv: "//", exp.Mod: "%"}
_EXTRACT_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.Year: "year",
    exp.Quarter: "quarter",
    exp.Month: "month",
    exp.Day: "day",
    exp.Week: "week",
    exp.DayOfWeek: "dow",
    exp.DayOfWeekIso: "isodow",
    exp.DayOfYear: "doy",
}
_PART_NAMES = {
    "year": "year", "years": "year", "quarter": "quarter", "month": "month", "months": "month", "day": "day",
    "days": "day", "week": "week", "weeks": "week", "dow": "dow", "dayofweek": "dow", "isodow": "isodow",
    "doy": "doy", "dayofyear": "doy",
}  # fmt: skip
_TRUNC_PARTS = ("year", "quarter", "month", "week", "day")
_FINER_THAN_A_DAY = {
    "hour", "hours", "minute", "minutes", "min", "second", "seconds", "sec", "millisecond", "milliseconds", "ms",
    "microsecond", "microseconds", "us", "epoch", "timezone", "timezone_hour", "timezone_minute",
}  # fmt: skip
_FINER_FUNCTIONS: dict[type[exp.Expression], str] = {exp.Hour: "hour", exp.Minute: "minute", exp.Second: "second", exp.TimeToUnix: "epoch"}
_DERIVED_NODES = (exp.Case, exp.Neg, exp.Floor, exp.Ceil, exp.TimestampTrunc, exp.DateTrunc, exp.Extract,
                  *_BINARY, *_EXTRACT_FUNCTIONS, *_FINER_FUNCTIONS)  # fmt: skip


def is_derived(node: exp.Expression) -> bool:
    """Whether a GROUP BY / SELECT item is an expression the derived-column grammar may accept (checked
    in full by :func:`derived_column`)."""
    if isinstance(node, exp.Paren):
        return is_derived(node.this)
    if node.find(exp.AggFunc) is not None:  # COUNT(*) + 1: an aggregate expression, not a group column
        return False
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower() == "date_part"
    return isinstance(node, _DERIVED_NODES) or _is_day_cast(node)


def _is_day_cast(node: exp.Expression) -> bool:
    """``CAST(c AS DATE)``, ``c::DATE`` or ``DATE(c)`` of a column: its day."""
    if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
        return node.to.is_type(exp.DataType.Type.DATE) and isinstance(node.this, (exp.Column, exp.Paren))
    return isinstance(node, exp.Date) and len(node.expressions) == 0 and isinstance(node.this, (exp.Column, exp.Paren))


def derived_key(node: exp.Expression) -> str:
    """The name of a derived expression in grouping sets and ``Query.group_by``: its SQL text, without
    table qualifiers (``t.age / 10`` and ``age / 10`` are the same group)."""
    bare = node.copy()
    while isinstance(bare, exp.Paren):
        bare = bare.this
    for column in bare.find_all(exp.Column):
        column.set("table", None)
    return bare.sql(dialect="duckdb")


class _Checker(Protocol):
    """What :func:`derived_column` needs from the statement's checker (``dpsql.sql.parse.BranchChecker``)."""

    def _column(self, node: exp.Expression, clause: str) -> str: ...
    def _predicate(self, node: exp.Expression) -> Predicate: ...
    def _literal(self, node: exp.Expression, clause: str) -> object: ...


def derived_column(node: exp.Expression, checker: _Checker, columns_of: Callable[[Predicate], tuple[str, ...]]) -> Derived:
    """The IR of a derived expression, checked: it reads exactly one column."""
    key = derived_key(node)
    sources: list[str] = []
    expression = _expression(node, checker, columns_of, sources, key)
    names = list(dict.fromkeys(s.lower() for s in sources))
    if len(names) != 1:
        what = "no column" if not names else f"{len(names)} columns"
        raise NotSupportedError(f"GROUP BY {key[:60]!r}: a derived group column must read exactly one column, not {what}. {ACCEPTED}")
    return Derived(key, sources[0], expression)


def _expression(node: exp.Expression, checker: _Checker, columns_of: Callable, sources: list[str], key: str) -> Expression:
    if isinstance(node, exp.Paren):
        return _expression(node.this, checker, columns_of, sources, key)
    if isinstance(node, exp.Column):
        sources.append(checker._column(node, "GROUP BY"))
        return Source()
    if isinstance(node, exp.Literal) and not node.is_string:
        if not str(node.this).isdigit():
            raise NotSupportedError(
                f"GROUP BY {key[:60]!r}: the number {node.this} is not an integer literal (DuckDB would compute with "
                f"DECIMAL); use integers. {ACCEPTED}"
            )
        return Number(int(str(node.this)))
    if type(node) in _BINARY:
        return Binary(_BINARY[type(node)], *(_expression(n, checker, columns_of, sources, key) for n in (node.this, node.expression)))
    if isinstance(node, (exp.Neg, exp.Floor, exp.Ceil)):
        if node.args.get("decimals") or node.args.get("to"):
            raise NotSupportedError(f"GROUP BY {key[:60]!r}: floor/ceil take one argument here. {ACCEPTED}")
        name = {exp.Neg: "neg", exp.Floor: "floor", exp.Ceil: "ceil"}[type(node)]
        return Function(name, _expression(node.this, checker, columns_of, sources, key))
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        part = _part(node.args.get("unit"), key)
        if part not in _TRUNC_PARTS:
            raise NotSupportedError(f"GROUP BY {key[:60]!r}: date_trunc to {part!r} is not supported. {ACCEPTED}")
        return Function(f"trunc:{part}", _date_argument(node.this, checker, sources, key))
    if _is_day_cast(node):
        return Function("day_of", _date_argument(node.this, checker, sources, key))
    if isinstance(node, exp.Extract):
        return Function(f"extract:{_part(node.this, key)}", _date_argument(node.expression, checker, sources, key))
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "date_part" and len(node.expressions) == 2:
        return Function(f"extract:{_part(node.expressions[0], key)}", _date_argument(node.expressions[1], checker, sources, key))
    if type(node) in _FINER_FUNCTIONS:
        raise _finer_than_a_day(_FINER_FUNCTIONS[type(node)], key)
    if type(node) in _EXTRACT_FUNCTIONS:
        return Function(f"extract:{_EXTRACT_FUNCTIONS[type(node)]}", _date_argument(node.this, checker, sources, key))
    if isinstance(node, exp.Case):
        return _case(node, checker, columns_of, sources, key)
    raise NotSupportedError(f"GROUP BY {key[:60]!r}: {node.sql(dialect='duckdb')[:40]!r} is not supported in a derived group column. {ACCEPTED}")


def _date_argument(node: exp.Expression, checker: _Checker, sources: list[str], key: str) -> Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Column):
        raise NotSupportedError(f"GROUP BY {key[:60]!r}: date functions apply to a declared date column itself. {ACCEPTED}")
    sources.append(checker._column(node, "GROUP BY"))
    return Source()


def _part(node: exp.Expression | None, key: str) -> str:
    text = "" if node is None else str(node.name if isinstance(node, (exp.Var, exp.Literal)) else node.sql()).lower()
    if text in _FINER_THAN_A_DAY:
        raise _finer_than_a_day(text, key)
    if text not in _PART_NAMES:
        raise NotSupportedError(f"GROUP BY {key[:60]!r}: the date part {text!r} is not supported. {ACCEPTED}")
    return _PART_NAMES[text]


def _finer_than_a_day(part: str, key: str) -> NotSupportedError:
    return NotSupportedError(
        f"GROUP BY {key[:60]!r}: the date part {part!r} is finer than a day, the cell of a date or of a TIMESTAMP declared as a "
        "range of days; group by the day, CAST(<column> AS DATE), or a coarser part (day, week, month, quarter, year) — or, "
        "on timestamp categories, group by the column and compute the part in the SELECT list"
    )


def _case(node: exp.Case, checker: _Checker, columns_of: Callable, sources: list[str], key: str) -> CaseWhen:
    if node.this is not None:
        raise NotSupportedError(f"GROUP BY {key[:60]!r}: write CASE WHEN <condition> THEN ..., not CASE <value> WHEN .... {ACCEPTED}")
    branches = []
    for when in node.args.get("ifs") or []:
        condition = checker._predicate(when.this)
        sources.extend(columns_of(condition))
        branches.append((condition, checker._literal(when.args["true"], "CASE THEN")))
    default = node.args.get("default")
    otherwise = None if default is None else checker._literal(default, "CASE ELSE")
    values = [v for _, v in branches] + [otherwise]
    kinds = {type(v) for v in values if v is not None}
    if float in kinds or len(kinds) > 1:
        raise NotSupportedError(
            f"GROUP BY {key[:60]!r}: THEN/ELSE values must all be strings, all integers or all booleans (or NULL); "
            f"got {sorted(k.__name__ for k in kinds)}. {ACCEPTED}"
        )
    return CaseWhen(tuple(branches), otherwise)


# ---------------------------------------------------------------------------------------------
# IR + the source's declared domain → the public map.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DerivedMap:
    """The derived values as a categories domain (NULL as its nullable cell) and, per source cell, the
    derived cell it falls in."""

    domain: ColumnDomain
    cell_of: np.ndarray


Truth = Callable[["Predicate"], np.ndarray]  # Kleene truth (0/1/2) of a condition on every source cell


def derived_map(derived: Derived, column: ColumnDomain, truth: Truth) -> DerivedMap:
    """Evaluate ``derived`` on every cell of its source ``column`` (declared values, then the NULL cell)."""
    if column.kind == "keys":
        raise NotSupportedError(
            f"GROUP BY {derived.key[:60]!r}: {column.name!r} has released keys, not a declared domain; declare its "
            f"categories or range in the schema to group by an expression over it"
        )
    if column.kind == "bins" and not isinstance(derived.expression, CaseWhen):
        raise NotSupportedError(
            f"GROUP BY {derived.key[:60]!r}: {column.name!r} is declared as bins, whose values inside a bin are unknown; "
            "only CASE WHEN on bin edges maps bins exactly"
        )
    if isinstance(derived.expression, CaseWhen):
        values = _case_values(derived.expression, column, truth)
    else:
        labels = column.labels()[: column.value_cells] + ((None,) if column.nullable else ())
        values = [_evaluate(derived.expression, cell, derived.key, column) for cell in labels]
    present = [v for v in dict.fromkeys(values) if v is not None]
    if len(present) > MAX_DERIVED_CELLS:
        raise NotSupportedError(f"GROUP BY {derived.key[:60]!r}: more than {MAX_DERIVED_CELLS} distinct values; use coarser groups")
    nullable = any(v is None for v in values)
    position = {v: i for i, v in enumerate(present)}
    cell_of = np.array([len(present) if v is None else position[v] for v in values], dtype=np.int64)
    return DerivedMap(ColumnDomain(derived.key, "categories", tuple(present), nullable), cell_of)


def _case_values(case: CaseWhen, column: ColumnDomain, truth: Truth) -> list[object]:
    values: list[object] = [case.default] * column.size
    decided = np.zeros(column.size, dtype=bool)
    for condition, value in case.branches:
        holds = (truth(condition) == 2) & ~decided  # TRUE only: NULL (UNKNOWN) falls through, as in SQL
        for cell in np.flatnonzero(holds):
            values[cell] = value
        decided |= holds
    return values


def _evaluate(expression: Expression, cell: object, key: str, column: ColumnDomain) -> object:
    """DuckDB's value of ``expression`` at the source value ``cell`` (None is NULL)."""
    if isinstance(expression, Source):
        return cell
    if isinstance(expression, Number):
        return expression.value
    if isinstance(expression, Function):
        value = _evaluate(expression.argument, cell, key, column)
        return None if value is None else _function(expression.name, value, key, column)
    if isinstance(expression, Binary):
        left = _evaluate(expression.left, cell, key, column)
        right = _evaluate(expression.right, cell, key, column)
        return None if left is None or right is None else _binary(expression.operator, left, right, key, column)
    raise NotSupportedError(f"GROUP BY {key[:60]!r}: CASE may not be nested in an expression. {ACCEPTED}")


def _numeric(value: object, key: str, column: ColumnDomain) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NotSupportedError(
            f"GROUP BY {key[:60]!r}: arithmetic needs a numeric column; {column.name!r} is {column.describe()}. {ACCEPTED}"
        )
    return value


def _checked_integer(value: int, key: str) -> int:
    if not -INT64 <= value < INT64:
        raise NotSupportedError(f"GROUP BY {key[:60]!r}: a value overflows a 64-bit integer on the declared domain; use smaller factors")
    return value


def _binary(operator: str, left: object, right: object, key: str, column: ColumnDomain) -> int | float:
    a, b = _numeric(left, key, column), _numeric(right, key, column)
    integers = isinstance(a, int) and isinstance(b, int)
    if operator in ("/", "//", "%") and b == 0:
        raise NotSupportedError(f"GROUP BY {key[:60]!r}: divides by zero on a value of the declared domain of {column.name!r}")
    if operator == "/":
        return a / b  # DuckDB: '/' is floating-point division, also of integers
    if operator in ("//", "%"):
        if not integers:
            raise NotSupportedError(f"GROUP BY {key[:60]!r}: // and % are accepted on integers only. {ACCEPTED}")
        quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # truncated toward zero, as DuckDB
        return _checked_integer(quotient if operator == "//" else a - b * quotient, key)  # type: ignore[operator]
    result = a + b if operator == "+" else a - b if operator == "-" else a * b
    return _checked_integer(result, key) if integers else result  # type: ignore[arg-type]


def _function(name: str, value: object, key: str, column: ColumnDomain) -> object:
    if name == "neg":
        number = _numeric(value, key, column)
        return _checked_integer(-number, key) if isinstance(number, int) else -number
    if name in ("floor", "ceil"):
        number = _numeric(value, key, column)
        return float(math.floor(number) if name == "floor" else math.ceil(number))  # DuckDB returns DOUBLE
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        raise NotSupportedError(f"GROUP BY {key[:60]!r}: date functions on timestamps with a time zone depend on the session's zone; declare naive timestamps or dates")
    if not isinstance(value, datetime.date):
        raise NotSupportedError(
            f"GROUP BY {key[:60]!r}: date functions need a date column; {column.name!r} is {column.describe()}. {ACCEPTED}"
        )
    if name == "day_of":  # CAST(c AS DATE): DuckDB's DATE
        return value.date() if isinstance(value, datetime.datetime) else value
    kind, part = name.split(":")
    return _truncated(value, part) if kind == "trunc" else _extracted(value, part)


def _truncated(value: datetime.date, part: str) -> datetime.datetime:
    """``date_trunc(part, value)``: DuckDB returns a TIMESTAMP for a DATE (and for a TIMESTAMP)."""
    day = value.date() if isinstance(value, datetime.datetime) else value
    if part == "year":
        day = day.replace(month=1, day=1)
    elif part == "quarter":
        day = day.replace(month=3 * ((day.month - 1) // 3) + 1, day=1)
    elif part == "month":
        day = day.replace(day=1)
    elif part == "week":  # ISO weeks start on Monday
        day = day - datetime.timedelta(days=day.weekday())
    return datetime.datetime(day.year, day.month, day.day)


def _extracted(value: datetime.date, part: str) -> int:
    if part == "year":
        return value.year
    if part == "quarter":
        return (value.month - 1) // 3 + 1
    if part == "month":
        return value.month
    if part == "day":
        return value.day
    if part == "week":
        return value.isocalendar().week
    if part == "dow":  # Sunday = 0
        return value.isoweekday() % 7
    if part == "isodow":
        return value.isoweekday()
    if part == "doy":
        return value.timetuple().tm_yday
    raise ProgrammingError(f"unknown date part {part!r}")  # unreachable: parts are checked when parsed
