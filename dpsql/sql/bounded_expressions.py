"""Expressions inside SUM, AVG, VARIANCE and STDDEV whose bounds follow from the schema by interval arithmetic.

``SUM(age + income)``, ``SUM(CASE WHEN age > 90 THEN 1 ELSE 0 END)``, ``AVG(CASE WHEN sex = 'M' THEN age END)``:
the aggregated value is an expression of several columns. Its interval is computed from the declared
``bounds`` (or integer ``range`` / ``bins`` edges) of its numeric columns and the declared categories of
the columns it compares with literals, by interval arithmetic (Moore, *Interval Analysis*, 1966):

* ``a + b`` → ``[a.lo + b.lo, a.hi + b.hi]``; ``a − b`` → ``[a.lo − b.hi, a.hi − b.lo]``; ``a · b`` → the
  least and greatest of the four end products; ``a / c`` for a number ``c ≠ 0`` → the ends divided by ``c``;
  ``−a``, ``ABS(a)``;
* ``CASE``/``IF``/``COALESCE`` → the hull of their branches (a branch ``NULL`` adds nothing: the row is NULL
  and, as in SQL, ignored by the aggregate); ``LEAST``/``GREATEST`` → the least/greatest of the ends;
* a comparison used as a number (``SUM(age > 90)``) → ``[0, 1]``.

The expression is computed by the engine on the bounded rows, in ``DOUBLE``, with every numeric column first
clamped to its bounds (``LEAST(GREATEST(CAST(c AS DOUBLE), lo), hi)``, NULL kept NULL) — so no arithmetic can overflow or
fail, whatever a row holds — and the result is clamped to the derived interval by the moment cells
(``dpsql.sql.moments``), which treat it exactly like a column with those bounds: a NULL goes to the NULL cell
(ignored, as SQL's aggregates do), NaN and ±infinity clamp to an end. The aggregate's sensitivity is then
that of its interval (``docs/sql.md``); EXPLAIN shows the interval. A numeric column without bounds, a
division by a column, a literal that is not one of a compared column's declared categories, and functions
outside this list are refused in prepare, before anything is read.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.schema import ColumnDomain
from dpsql.sql.literals import sql_literal

SUPPORTED = (
    "an aggregated expression may use its columns with declared bounds, numbers, + - *, / by a number, ABS, CASE, IF, "
    "COALESCE, LEAST, GREATEST and comparisons (docs/sql.md)"
)
_COMPARISONS: dict[type[exp.Expression], str] = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_CONDITIONS = (*_COMPARISONS, exp.In, exp.Between, exp.Is, exp.And, exp.Or, exp.Not)
_NUMERIC_TYPES = {
    exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT, exp.DataType.Type.DECIMAL, exp.DataType.Type.BIGDECIMAL,
}
_AFFINE = (exp.Column, exp.Identifier, exp.Literal, exp.Neg, exp.Paren, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Cast, exp.DataType)
_SHAPES = (
    exp.Column, exp.Identifier, exp.Literal, exp.Null, exp.Boolean, exp.Neg, exp.Paren, exp.Add, exp.Sub, exp.Mul, exp.Div,
    exp.Case, exp.If, exp.Coalesce, exp.Least, exp.Greatest, exp.Abs, exp.Cast, exp.DataType, exp.DataTypeParam, exp.Tuple,
    *_CONDITIONS,
)


def checked_argument(node: exp.Expression, column: Callable[[exp.Expression, str], str], function: str) -> str:
    """The text of an aggregated expression (``function``'s argument, not a plain column), its columns named as
    ``column`` checks them (quoted); refuses what interval arithmetic cannot bound, from the statement alone."""
    tree = node.copy()
    if len(list(tree.find_all(exp.Column))) == 1 and all(_affine_part(p) for p in tree.walk()):
        # ``a·x + b`` of one column: the statement is rewritten with the column's own aggregates (exact, and
        # answered by the column's measurements: ``dpsql.sql.split``), never measured as an expression
        raise NotSupportedError(
            f"SELECT {function}: {node.sql(dialect='duckdb')[:60]!r} is not a plain column; write the aggregate of a column and "
            "compute on its result, e.g. SUM(age) + COUNT(*) for SUM(age + 1) (docs/sql.md)"
        )
    for part in tree.walk():
        if not isinstance(part, _SHAPES) or isinstance(part, exp.AggFunc):
            shown = part.sql(dialect="duckdb")[:40]
            raise NotSupportedError(f"SELECT {function}({node.sql(dialect='duckdb')[:60]}): {shown!r} is not supported there; {SUPPORTED}")
        if isinstance(part, exp.Div) and number_of(part.expression) is None:
            raise NotSupportedError(
                f"SELECT {function}({node.sql(dialect='duckdb')[:60]}): division by {part.expression.sql(dialect='duckdb')[:40]!r} "
                f"has no bound; write a division by a number, or divide the aggregates in an outer SELECT (e.g. SUM(a) / SUM(b))"
            )
    names = [column(leaf, f"SELECT {function}") for leaf in tree.find_all(exp.Column)]
    if not names:
        raise NotSupportedError(f"SELECT {function}({node.sql(dialect='duckdb')[:60]}) reads no column; compute it from COUNT(*) in an outer SELECT")
    return _text(tree, names)


def _text(tree: exp.Expression, names: list[str]) -> str:
    """The expression's text with its columns (in ``find_all`` order) named ``names``: unquoted where that reads
    back as the same names (what EXPLAIN and the result's column name show), else quoted."""
    for quoted in (False, True):
        copy = tree.copy()
        for leaf, name in zip(list(copy.find_all(exp.Column)), names):
            leaf.replace(exp.column(name, quoted=quoted or not re.fullmatch(r"[a-z_][a-z0-9_]*", name)))
        text = copy.sql(dialect="duckdb")
        if quoted or [c.name for c in _parsed(text).find_all(exp.Column)] == names:  # type: ignore[union-attr]
            return text
    raise AssertionError("unreachable")


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> exp.Expression | None:
    """An expression's text parsed (None when it does not parse)."""
    try:
        return sqlglot.parse_one(text, dialect="duckdb")
    except sqlglot.errors.ParseError:
        return None


def columns_of(text: str) -> tuple[str, ...]:
    """The columns an aggregated expression reads."""
    tree = _parsed(text)
    return () if tree is None else tuple(dict.fromkeys(c.name for c in tree.find_all(exp.Column)))


def resolved(text: str, resolve: Callable[[str], str]) -> str:
    """The expression with each column named as the table spells it (``resolve``)."""
    tree = _parsed(text)
    assert tree is not None
    return _text(tree, [resolve(leaf.name) for leaf in tree.find_all(exp.Column)])


@dataclass(frozen=True)
class Bounded:
    """A numeric sub-expression: its interval (empty for NULL: ``low > high``), whether its values are integers,
    and its SQL over clamped columns."""

    low: float
    high: float
    integral: bool
    sql: exp.Expression
    nullable: bool = True  # it may be NULL on some row

    @property
    def empty(self) -> bool:
        return self.low > self.high


@dataclass(frozen=True)
class DerivedBounds:
    """What prepare derives for an aggregated expression: its interval, the lattice its values lie on (1 for
    integers, None for any real), and the SQL text computing it from a bounded row."""

    low: float
    high: float
    resolution: float | None
    sql: str


def derive(text: str, columns: Callable[[str], ColumnDomain], function: str) -> DerivedBounds:
    """The interval, lattice and SQL of an aggregated expression over the table's declared domains (module doc).
    Runs in prepare; refuses a column without bounds or an interval that is not finite and wide."""
    tree = _parsed(text)
    assert tree is not None
    value = _Evaluator(columns, f"SELECT {function}({text[:60]})").number(tree)
    if value.empty or not (math.isfinite(value.low) and math.isfinite(value.high)):
        raise NotSupportedError(f"SELECT {function}({text[:60]}): the expression has no finite bounds; {SUPPORTED}")
    if value.low == value.high:
        raise NotSupportedError(
            f"SELECT {function}({text[:60]}): the expression takes one value ({value.low:g}) on every row; "
            "compute it from COUNT(*) in an outer SELECT"
        )
    return DerivedBounds(value.low, value.high, 1.0 if value.integral else None, value.sql.sql(dialect="duckdb"))


class _Evaluator:
    """Interval arithmetic over a parsed expression (module doc)."""

    def __init__(self, columns: Callable[[str], ColumnDomain], shown: str) -> None:
        self.columns = columns
        self.shown = shown

    def _refuse(self, node: exp.Expression, why: str) -> NotSupportedError:
        return NotSupportedError(f"{self.shown}: {node.sql(dialect='duckdb')[:40]!r} {why}; {SUPPORTED}")

    def number(self, node: exp.Expression) -> Bounded:
        if isinstance(node, exp.Paren):
            return self.number(node.this)
        if node.find(exp.Column) is None and node.find(exp.Null) is None and not isinstance(node, _CONDITIONS):
            folded = self.number_of(node)  # a constant: computed here, written as one DOUBLE literal (no engine arithmetic)
            if folded.low == folded.high:
                return Bounded(folded.low, folded.high, folded.integral, _literal(folded.low, double=True), nullable=False)
            return folded
        return self.number_of(node)

    def number_of(self, node: exp.Expression) -> Bounded:
        if isinstance(node, exp.Paren):
            return self.number(node.this)
        constant = number_of(node)
        if constant is not None:
            return Bounded(constant, constant, float(constant).is_integer(), _literal(constant), nullable=False)
        if isinstance(node, exp.Null):
            return Bounded(math.inf, -math.inf, True, exp.null())
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, exp.Neg):
            inner = self.number(node.this)
            return Bounded(-inner.high, -inner.low, inner.integral, exp.Neg(this=exp.paren(inner.sql)), inner.nullable)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            left, right = self.number(node.this), self.number(node.expression)
            if left.empty or right.empty:
                return Bounded(math.inf, -math.inf, True, exp.null())
            if isinstance(node, exp.Add):
                low, high = left.low + right.low, left.high + right.high
            elif isinstance(node, exp.Sub):
                low, high = left.low - right.high, left.high - right.low
            else:
                ends = [a * b for a in (left.low, left.high) for b in (right.low, right.high)]
                low, high = min(ends), max(ends)
            made = type(node)(this=exp.paren(left.sql), expression=exp.paren(right.sql))
            return Bounded(low, high, left.integral and right.integral, made, left.nullable or right.nullable)
        if isinstance(node, exp.Div):
            divisor = number_of(node.expression)
            if divisor is None or divisor == 0:
                raise self._refuse(node, "divides by zero or by a column, which has no bound")
            inner = self.number(node.this)
            ends = sorted((inner.low / divisor, inner.high / divisor))
            made = exp.Div(this=exp.paren(inner.sql), expression=_literal(divisor, double=True))
            return Bounded(ends[0], ends[1], inner.integral and abs(divisor) == 1, made, inner.nullable)
        if isinstance(node, exp.Abs):
            inner = self.number(node.this)
            low = 0.0 if inner.low <= 0 <= inner.high else min(abs(inner.low), abs(inner.high))
            return Bounded(low, max(abs(inner.low), abs(inner.high)), inner.integral, exp.Abs(this=inner.sql), inner.nullable)
        if isinstance(node, exp.Cast):
            if node.to.this not in _NUMERIC_TYPES:
                raise self._refuse(node, "casts to a type whose rounding differs between engines; cast to DOUBLE or DECIMAL")
            return self.number(node.this)
        if isinstance(node, (exp.Case, exp.If)):
            return self._case(node)
        if isinstance(node, (exp.Coalesce, exp.Least, exp.Greatest)):
            parts = [self.number(p) for p in (node.this, *node.expressions)]
            present = [p for p in parts if not p.empty]
            if not present:
                return Bounded(math.inf, -math.inf, True, exp.null())
            low, high = min(p.low for p in present), max(p.high for p in present)  # COALESCE: one of them
            skipping = isinstance(node, exp.Coalesce) or node.args.get("ignore_nulls")  # DuckDB's LEAST/GREATEST skip NULLs
            always = [p for p in present if not p.nullable] if skipping else present  # arguments present on every row
            if isinstance(node, exp.Least) and always:
                high = min(p.high for p in always)  # at most each argument that is there
            elif isinstance(node, exp.Greatest) and always:
                low = max(p.low for p in always)
            made = type(node)(this=parts[0].sql, expressions=[p.sql for p in parts[1:]], **({"ignore_nulls": node.args["ignore_nulls"]} if "ignore_nulls" in node.args else {}))
            nullable = all(p.nullable for p in parts) if skipping else any(p.nullable for p in parts)
            return Bounded(low, high, all(p.integral for p in present), made, nullable)
        if isinstance(node, _CONDITIONS):
            condition = self.condition(node)
            made = exp.Case(ifs=[exp.If(this=condition, true=exp.Literal.number(1)), exp.If(this=exp.Not(this=exp.paren(condition.copy())), true=exp.Literal.number(0))])
            return Bounded(0.0, 1.0, True, made)
        raise self._refuse(node, "has no bound here")

    def _column(self, node: exp.Column) -> Bounded:
        domain = self.columns(node.name)
        bounds = domain.value_bounds
        if bounds is None:
            raise NotSupportedError(
                f"{self.shown}: column {node.name!r} has no bounds; declare them in the schema "
                f"({node.name}: {{bounds: [lo, hi]}}), or compare it with one of its declared values"
            )
        low, high = float(bounds[0]), float(bounds[1])
        value = exp.column(node.name, quoted=True)
        # LEAST/GREATEST skip NULLs in every engine: a NULL stays NULL only by the CASE
        clamped = exp.Case(ifs=[exp.If(this=exp.Is(this=value.copy(), expression=exp.null()), true=exp.null())],
                           default=exp.func("LEAST", exp.func("GREATEST", exp.cast(value, "DOUBLE"), _literal(low)), _literal(high)))
        integral = domain.value_resolution == 1 and low.is_integer() and high.is_integer()
        return Bounded(low, high, integral, clamped, domain.nullable or not domain.is_known)

    def _case(self, node: exp.Expression) -> Bounded:
        if isinstance(node, exp.If):
            pairs = [(node.this, node.args["true"])]
            default = node.args.get("false")
        else:
            if node.this is not None:
                raise self._refuse(node, "is a simple CASE; write CASE WHEN column = value THEN …")
            pairs = [(branch.this, branch.args["true"]) for branch in node.args.get("ifs") or ()]
            default = node.args.get("default")
        conditions = [self.condition(c) for c, _ in pairs]
        values = [self.number(v) for _, v in pairs]
        otherwise = self.number(default) if default is not None else Bounded(math.inf, -math.inf, True, exp.null())
        present = [v for v in (*values, otherwise) if not v.empty]
        made = exp.Case(ifs=[exp.If(this=c, true=v.sql) for c, v in zip(conditions, values)], default=otherwise.sql if default is not None else None)
        if not present:
            return Bounded(math.inf, -math.inf, True, made)
        nullable = default is None or any(v.nullable for v in (*values, otherwise))
        return Bounded(min(v.low for v in present), max(v.high for v in present), all(v.integral for v in present), made, nullable)

    def condition(self, node: exp.Expression) -> exp.Expression:
        """A condition's SQL: comparisons of bounded values (on the clamped columns), or of a categorical column
        with its declared values."""
        if isinstance(node, exp.Paren):
            return exp.paren(self.condition(node.this))
        if isinstance(node, (exp.And, exp.Or)):
            return type(node)(this=self.condition(node.this), expression=self.condition(node.expression))
        if isinstance(node, exp.Not):
            return exp.Not(this=exp.paren(self.condition(node.this)))
        if isinstance(node, exp.Boolean):
            return node.copy()
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null) and isinstance(node.this, exp.Column):
            return exp.Is(this=exp.column(node.this.name, quoted=True), expression=exp.null())
        if isinstance(node, tuple(_COMPARISONS)):
            left, right = node.this, node.expression
            if isinstance(left, exp.Column) and self._categorical(left):
                return type(node)(this=exp.column(left.name, quoted=True), expression=self._category(left, right))
            if isinstance(right, exp.Column) and self._categorical(right):
                return type(node)(this=self._category(right, left), expression=exp.column(right.name, quoted=True))
            return type(node)(this=exp.paren(self._present(left)), expression=exp.paren(self._present(right)))
        if isinstance(node, exp.In) and isinstance(node.this, exp.Column) and self._categorical(node.this) and not node.args.get("query"):
            return exp.In(this=exp.column(node.this.name, quoted=True), expressions=[self._category(node.this, v) for v in node.expressions])
        if isinstance(node, exp.In) and not node.args.get("query"):
            return exp.In(this=exp.paren(self._present(node.this)), expressions=[exp.paren(self._present(v)) for v in node.expressions])
        if isinstance(node, exp.Between):
            value = self._present(node.this)
            return exp.Between(this=exp.paren(value), low=exp.paren(self._present(node.args["low"])), high=exp.paren(self._present(node.args["high"])))
        raise self._refuse(node, "is not a condition dpsql can bound")

    def _present(self, node: exp.Expression) -> exp.Expression:
        value = self.number(node)
        if value.empty:
            raise self._refuse(node, "is always NULL")
        return value.sql

    def _categorical(self, node: exp.Column) -> bool:
        domain = self.columns(node.name)
        return domain.value_bounds is None and domain.kind == "categories"

    def _category(self, column: exp.Column, node: exp.Expression) -> exp.Expression:
        """A literal compared with a categorical column, as that column's declared value."""
        domain = self.columns(column.name)
        literal = node.this if isinstance(node, exp.Paren) else node
        if isinstance(literal, exp.Literal):
            value: object = literal.this if literal.is_string else number_of(literal)
        else:
            value = number_of(literal) if isinstance(literal, exp.Neg) else None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if value is None or value not in domain.cell_of_value:
            raise ProgrammingError(
                f"{self.shown}: {node.sql(dialect='duckdb')[:40]} is not one of the declared values of {column.name!r} "
                f"({list(domain.values)[:10]}); use one of them"
            )
        return sql_literal(domain.values[domain.cell_of_value[value]])


def _affine_part(node: exp.Expression) -> bool:
    """A node of ``a·x + b`` (what ``dpsql.sql.split`` rewrites with the column's own aggregates)."""
    return isinstance(node, _AFFINE) and not (isinstance(node, exp.Cast) and node.to.this not in _NUMERIC_TYPES)


def number_of(node: exp.Expression) -> float | None:
    """The value of a finite number literal (signed, in parentheses or not); None for anything else."""
    if isinstance(node, exp.Paren):
        return number_of(node.this)
    if isinstance(node, exp.Neg):
        inner = number_of(node.this)
        return None if inner is None else -inner
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            value = float(str(node.this))
        except ValueError:
            return None
        return value if math.isfinite(value) else None
    return None


def _literal(value: float, double: bool = False) -> exp.Expression:
    """A number literal of the value (a negative one in parentheses); ``double``: always with a decimal point, so
    that no engine reads it as an integer (PostgreSQL's ``1 / 2`` is 0)."""
    whole = float(value).is_integer() and abs(value) < 2**53 and not double
    text = repr(int(value)) if whole else repr(float(value))
    node = exp.Literal.number(text.lstrip("-"))
    return exp.paren(exp.Neg(this=node)) if value < 0 else node
