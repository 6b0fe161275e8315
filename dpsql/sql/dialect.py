"""The SQL dialect dpsql reads: DuckDB's, plus the spellings other DP SQL tools' users write.

sqlglot parses every statement once, with :class:`Dpsql` — DuckDB's grammar (so what DuckDB runs, dpsql
reads the same way) extended by:

* T-SQL's ``SELECT TOP n …`` (and ``TOP (n)``), SmartNoise SQL's spelling of LIMIT: parsed into the
  SELECT's LIMIT, as T-SQL means it (a column named ``top`` still reads as a column);
* SmartNoise SQL's ``VAR(x)`` and ``STD(x)``: ``VARIANCE(x)`` and ``STDDEV(x)`` (the sample forms, as
  DuckDB's VARIANCE and STDDEV);
* aggregate ``FILTER (WHERE p)`` on COUNT, SUM, AVG and the variances: the CASE it stands for (:func:`filters_as_case`);
* Google's differential-privacy SQL: ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=…, delta=…,
  privacy_unit_column=…, max_groups_contributed=…) …`` — read into a :class:`DifferentialPrivacy` node
  kept as the SELECT's ``hint`` (:func:`dp_options` takes it off) — and the per-aggregate
  ``contribution_bounds_per_group => (lo, hi)`` argument of ``SUM``, ``AVG``, ``COUNT`` and the
  variance/standard-deviation aggregates (or ``contribution_bounds_per_row``, BigQuery's name on ``VAR_POP``
  and ``PERCENTILE_CONT(x, q, …)``), kept in the aggregate's ``meta`` under :data:`BOUNDS_KEY` with the name
  written under :data:`BOUNDS_NAME_KEY`.

>>> tree = parse_one("SELECT TOP 3 sex, VAR(age) FROM t GROUP BY sex")
>>> tree.sql(dialect="duckdb")
'SELECT sex, VARIANCE(age) FROM t GROUP BY sex LIMIT 3'
"""

from __future__ import annotations

from collections.abc import Callable

import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.tokens import TokenType

BOUNDS_KEY = "contribution_bounds_per_group"  # an aggregate's meta entry: the (lo, hi) expression
BOUNDS_NAME_KEY = "contribution_bounds_name"  # an aggregate's meta entry: the argument's name as written
BOUNDS_NAMES = (BOUNDS_KEY, "contribution_bounds_per_row")  # Google's names for an aggregate's clamping bounds
_TOP_ARGUMENTS = (TokenType.NUMBER, TokenType.L_PAREN)


class DifferentialPrivacy(exp.Expression):
    """``WITH DIFFERENTIAL_PRIVACY OPTIONS(name = value, …)`` of a SELECT (Google's DP SQL)."""

    arg_types = {"expressions": True}


def _with_bounds(kind: type[exp.Func]) -> Callable[[list[exp.Expression]], exp.Expression]:
    """A builder of ``kind`` that takes a ``contribution_bounds_per_group => (lo, hi)`` (or ``…_per_row``)
    argument into the node's meta (sqlglot would count it as one argument too many)."""

    def build(args: list[exp.Expression]) -> exp.Expression:
        named = [a for a in args if isinstance(a, exp.Kwarg) and a.this.name.lower() in BOUNDS_NAMES]
        args[:] = [a for a in args if a not in named]  # the parser validates the node against this list
        node = kind.from_arg_list(args)
        for argument in named:
            node.meta[BOUNDS_KEY] = argument.expression
            node.meta[BOUNDS_NAME_KEY] = argument.this.name.lower()
        return node

    return build


_BOUNDED_AGGREGATES = (
    ("SUM", exp.Sum), ("AVG", exp.Avg), ("COUNT", exp.Count), ("VARIANCE", exp.Variance), ("VAR_SAMP", exp.Variance),
    ("VAR_POP", exp.VariancePop), ("STDDEV", exp.Stddev), ("STDDEV_SAMP", exp.StddevSamp), ("STDDEV_POP", exp.StddevPop),
    ("PERCENTILE_CONT", exp.PercentileCont),
)


def _bounds_written(kind: type[exp.Expression]) -> Callable[[DuckDB.Generator, exp.Expression], str]:
    """The SQL of a ``kind`` node as DuckDB writes it, with its ``contribution_bounds_…`` argument back in place."""

    def generate(generator: DuckDB.Generator, node: exp.Expression) -> str:
        default = DuckDB.Generator.TRANSFORMS.get(kind)
        text = default(generator, node) if default is not None else getattr(generator, f"{node.key}_sql", generator.function_fallback_sql)(node)
        bounds = node.meta.get(BOUNDS_KEY)
        if bounds is None or not text.endswith(")"):
            return text
        return f"{text[:-1]}, {node.meta.get(BOUNDS_NAME_KEY, BOUNDS_KEY)} => {generator.sql(bounds)})"

    return generate


class Dpsql(DuckDB):
    """DuckDB's dialect with TOP, SmartNoise's VAR/STD and Google's DIFFERENTIAL_PRIVACY options (read, and written
    back as read: a statement shown or re-parsed keeps its options and bounds)."""

    class Parser(DuckDB.Parser):
        FUNCTIONS = {
            **DuckDB.Parser.FUNCTIONS,
            "VAR": exp.Variance.from_arg_list,
            "STD": exp.Stddev.from_arg_list,
            "PERCENTILE_APPROX": exp.ApproxQuantile.from_arg_list,  # Spark's spelling (column, fraction[, accuracy])
            "APPROX_PERCENTILE": exp.ApproxQuantile.from_arg_list,  # Trino's and Databricks'
            **{name: _with_bounds(kind) for name, kind in _BOUNDED_AGGREGATES},
        }

        def _parse_hint(self) -> exp.Expression | None:  # type: ignore[override]
            if self._match_text_seq("WITH", "DIFFERENTIAL_PRIVACY"):
                if not self._match_text_seq("OPTIONS"):
                    self.raise_error("expected OPTIONS(name = value, ...) after WITH DIFFERENTIAL_PRIVACY")
                self._match_l_paren()
                options = self._parse_csv(self._parse_assignment)
                self._match_r_paren()
                return self.expression(DifferentialPrivacy(expressions=options))
            return super()._parse_hint()

        def _parse_limit(self, this: exp.Expression | None = None, top: bool = False, skip_limit_token: bool = False) -> exp.Expression | None:  # type: ignore[override]
            if top and self._curr is not None and self._curr.text.upper() == "TOP" and self._next is not None and self._next.token_type in _TOP_ARGUMENTS:
                self._advance()
                return super()._parse_limit(this, top=True, skip_limit_token=True)
            return super()._parse_limit(this, top, skip_limit_token)


    class Generator(DuckDB.Generator):
        TRANSFORMS = {
            **DuckDB.Generator.TRANSFORMS,
            DifferentialPrivacy: lambda generator, node: f" WITH DIFFERENTIAL_PRIVACY OPTIONS({generator.expressions(node, flat=True)})",
            **{kind: _bounds_written(kind) for _, kind in _BOUNDED_AGGREGATES},
        }


def parse(sql: str) -> list[exp.Expression | None]:
    """``sqlglot.parse`` in dpsql's dialect, aggregate FILTER clauses read as CASE (:func:`filters_as_case`)."""
    return [None if tree is None else filters_as_case(tree) for tree in sqlglot.parse(sql, read=Dpsql)]


def parse_one(sql: str) -> exp.Expression:
    return filters_as_case(sqlglot.parse_one(sql, read=Dpsql))


_FILTERED_MOMENTS = (exp.Sum, exp.Avg, exp.Variance, exp.VariancePop, exp.Stddev, exp.StddevSamp, exp.StddevPop)


def filters_as_case(tree: exp.Expression) -> exp.Expression:
    """SQL's aggregate ``FILTER (WHERE p)`` as the CASE it stands for: ``AGG(x) FILTER (WHERE p)`` is
    ``AGG(CASE WHEN p THEN x END)`` for SUM, AVG and the variances (NULLs are skipped either way), and
    ``COUNT(*) FILTER (WHERE p)`` is ``SUM(CASE WHEN p THEN 1 ELSE 0 END)`` (``COUNT(x)``: ``p AND x IS NOT
    NULL``) — a row UNKNOWN under ``p`` is left out by both. The CASE is then an aggregated expression with
    bounds by interval arithmetic (``dpsql.sql.bounded_expressions``). An unaliased SELECT item keeps its
    written text as its name. Other filtered aggregates (DISTINCT, quantiles) stay as written, refused later."""

    def rewrite(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Filter) or not isinstance(node.expression, exp.Where):
            return node
        aggregate, condition = node.this, node.expression.this
        argument = aggregate.this if isinstance(aggregate, exp.Func) else None
        if isinstance(argument, exp.Distinct):
            return node
        if isinstance(aggregate, exp.Count):
            counted = condition.copy() if argument is None or isinstance(argument, exp.Star) else exp.and_(
                exp.paren(condition.copy()), exp.Not(this=exp.Is(this=argument.copy(), expression=exp.Null()))
            )
            rewritten: exp.Expression = exp.Sum(this=exp.Case().when(counted, exp.Literal.number(1)).else_(exp.Literal.number(0)))
            rewritten.meta.update(aggregate.meta)
        elif type(aggregate) in _FILTERED_MOMENTS and argument is not None:
            rewritten = aggregate.copy()
            rewritten.set("this", exp.Case().when(condition.copy(), argument.copy()))
        else:
            return node
        if isinstance(node.parent, exp.Select) and node.arg_key == "expressions":
            return exp.alias_(rewritten, node.sql(dialect="duckdb"), quoted=True)
        return rewritten

    if tree.find(exp.Filter) is None:  # most statements: no walk that rebuilds the tree (a 10⁴-item IN list)
        return tree
    return tree.transform(rewrite, copy=False)


def dp_options(select: exp.Expression) -> dict[str, exp.Expression]:
    """Take a SELECT's ``WITH DIFFERENTIAL_PRIVACY OPTIONS(…)`` off it: lower-case option name → value node."""
    hint = select.args.get("hint") if isinstance(select, exp.Select) else None
    if not isinstance(hint, DifferentialPrivacy):
        return {}
    select.set("hint", None)
    options: dict[str, exp.Expression] = {}
    for option in hint.expressions:
        if not isinstance(option, exp.EQ) or not isinstance(option.this, exp.Column) or option.this.table:
            raise_option(option)
        options[option.this.name.lower()] = option.expression
    return options


def raise_option(option: exp.Expression) -> None:
    from dpsql.errors import ProgrammingError

    raise ProgrammingError(
        f"WITH DIFFERENTIAL_PRIVACY OPTIONS: cannot read {option.sql(dialect='duckdb')[:60]!r}; write name = value, "
        "e.g. OPTIONS(epsilon = 1, delta = 1e-6, privacy_unit_column = person_id)"
    )
