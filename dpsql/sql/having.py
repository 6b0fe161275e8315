"""HAVING: a condition on a statement's released counts, applied to the released rows (post-processing).

``HAVING COUNT(*) > 100 AND NOT COUNT(job) < 5`` compares aggregates (or the aliases of the SELECT list's
aggregates) with numbers, combined with AND / OR / NOT. It is evaluated on the *released* (noisy)
values, after the statement has been measured, so it costs no privacy budget; a row it drops is dropped
after the noise, so its absence says nothing beyond the noisy value itself. An aggregate that HAVING (or
ORDER BY) uses but the SELECT list does not show is measured too (it is part of the statement's
workload, and priced with it) and then left out of the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import NotSupportedError, ProgrammingError

HAVING_SUPPORTED = (
    "a HAVING condition of another form is applied to the released rows by the statement's public shell "
    "(docs/sql.md#public-shells-what-is-free)"
)
_OPERATORS: dict[type[exp.Expression], str] = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class Test:
    """Output column ``position`` (an aggregate) compared with ``value``."""

    position: int
    operator: str
    value: float


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class Negation:
    part: Condition


Condition = Test | AllOf | AnyOf | Negation


def is_aggregate(node: exp.Expression) -> bool:
    """An aggregate call: ``COUNT(*)``, ``AVG(x)``, … or ``PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x)``."""
    return isinstance(node, (exp.AggFunc, exp.WithinGroup))


def aggregates(node: exp.Expression) -> list[exp.Expression]:
    """The aggregate calls a HAVING / ORDER BY expression uses (a WITHIN GROUP call as a whole)."""
    return [n for n in node.find_all(exp.AggFunc, exp.WithinGroup) if not isinstance(n.parent, exp.WithinGroup)]


def having_condition(node: exp.Expression, position_of: Callable[[exp.Expression], int | None]) -> Condition:
    """The condition of a HAVING clause; ``position_of`` finds the output column of an aggregate or alias
    (None when it names no aggregate)."""
    if isinstance(node, exp.Paren):
        return having_condition(node.this, position_of)
    if isinstance(node, (exp.And, exp.Or)):
        parts = tuple(having_condition(part, position_of) for part in node.flatten())
        return AllOf(parts) if isinstance(node, exp.And) else AnyOf(parts)
    if isinstance(node, exp.Not):
        return Negation(having_condition(node.this, position_of))
    if type(node) in _OPERATORS:
        operator = _OPERATORS[type(node)]
        left, right = node.this, node.expression
        number = _number(right)
        if number is None:
            left, right, operator, number = right, left, _FLIPPED[operator], _number(left)
        position = position_of(left)
        if number is None or position is None:
            raise NotSupportedError(f"HAVING: {node.sql(dialect='duckdb')[:60]!r} is not supported. {HAVING_SUPPORTED}")
        return Test(position, operator, number)
    raise NotSupportedError(f"HAVING: {node.sql(dialect='duckdb')[:60]!r} is not supported. {HAVING_SUPPORTED}")


def _number(node: exp.Expression) -> float | None:
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    if isinstance(inner, exp.Paren):
        return _number(inner.this)
    if isinstance(inner, exp.Literal) and not inner.is_string:
        try:
            value = float(str(inner.this))
        except ValueError as error:
            raise ProgrammingError(f"HAVING: {inner.sql()!r} is not a number") from error
        return -value if negative else value
    return None


def holds(condition: Condition, row: tuple[object, ...]) -> bool:
    """Whether a released row satisfies the condition (its aggregates are never NULL)."""
    if isinstance(condition, AllOf):
        return all(holds(part, row) for part in condition.parts)
    if isinstance(condition, AnyOf):
        return any(holds(part, row) for part in condition.parts)
    if isinstance(condition, Negation):
        return not holds(condition.part, row)
    value = float(row[condition.position])  # type: ignore[arg-type]
    operator, bound = condition.operator, condition.value
    if operator == "=":
        return value == bound
    if operator == "<>":
        return value != bound
    if operator == "<":
        return value < bound
    if operator == "<=":
        return value <= bound
    if operator == ">":
        return value > bound
    return value >= bound
