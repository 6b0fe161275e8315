"""sqlglot dialects for the engines dpsql runs its bounded aggregation on.

The bounded statement (:mod:`dpsql.sql.bounded`) orders each privacy unit's rows by
``HASH(HASH(<unit>, <cells>, <salt>))`` (see ``salted_order_key``), DuckDB's hash function with a
secret salt drawn afresh for every statement, and labels grouping sets with ``GROUPING(c0, c1, ...)``. sqlglot passes both through
unchanged to PostgreSQL and Spark, where they do not exist (PostgreSQL has no ``HASH``; Spark's
``grouping`` takes one column). The two dialects below are the stock ones plus those rewrites:

- PostgreSQL: ``HASH(a, b, salt)`` → ``hashtextextended(concat_ws(',', a, b, salt), 0)``
  (64-bit hash of the cells' text with the salt in it);
- Spark: ``HASH(a, b, salt)`` → ``xxhash64(a, b, salt)`` (64-bit; Spark's own ``hash`` is 32-bit),
  and ``GROUPING(a, b, c)`` → ``grouping(a) * 4 + grouping(b) * 2 + grouping(c)``, the same bit
  mask (first column = highest bit).

A backend's ``dialect`` is the registered name (:data:`POSTGRES`, :data:`SPARK`, ``"duckdb"``), so
``statement.sql(dialect=backend.dialect)`` renders the engine's own SQL; sqlglot's stock dialect of
the same engine parses it back.

>>> from sqlglot import exp
>>> exp.func("HASH", exp.column("c0"), exp.Literal.number(7)).sql(dialect=SPARK)
'XXHASH64(c0, 7)'
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.dialects.spark import Spark
from sqlglot.generator import Generator

#: the name of DuckDB's hash function, as :mod:`dpsql.sql.bounded` writes it
SALTED_HASH = "HASH"


def _is_salted_hash(expression: exp.Anonymous) -> bool:
    return isinstance(expression.this, str) and expression.this.upper() == SALTED_HASH


class DpsqlPostgres(Postgres):
    """PostgreSQL with DuckDB's ``HASH(...)`` rendered as ``hashtextextended``."""

    class Generator(Postgres.Generator):  # type: ignore[name-defined,misc]
        def anonymous_sql(self, expression: exp.Anonymous) -> str:
            if not _is_salted_hash(expression):
                return super().anonymous_sql(expression)
            text = self.func("CONCAT_WS", exp.Literal.string(","), *expression.expressions)
            return self.func("HASHTEXTEXTENDED", text, exp.Literal.number(0))


def _spark_grouping_sql(generator: Generator, expression: exp.Grouping) -> str:
    columns = expression.expressions
    if len(columns) <= 1:
        return generator.function_fallback_sql(expression)
    bits = [
        exp.Mul(this=exp.Grouping(expressions=[c.copy()]), expression=exp.Literal.number(1 << (len(columns) - 1 - i)))
        for i, c in enumerate(columns)
    ]
    total: exp.Expression = bits[0]
    for bit in bits[1:]:
        total = exp.Add(this=total, expression=bit)
    return generator.sql(exp.Paren(this=total))


class DpsqlSpark(Spark):
    """Spark SQL with ``HASH(...)`` rendered as ``xxhash64`` and multi-column ``GROUPING`` as a bit sum."""

    class Generator(Spark.Generator):  # type: ignore[name-defined,misc]
        TRANSFORMS = {**Spark.Generator.TRANSFORMS, exp.Grouping: _spark_grouping_sql}

        def anonymous_sql(self, expression: exp.Anonymous) -> str:
            if not _is_salted_hash(expression):
                return super().anonymous_sql(expression)
            return self.func("XXHASH64", *expression.expressions)


DUCKDB = "duckdb"
POSTGRES = "dpsqlpostgres"
SPARK = "dpsqlspark"

#: engine names used in error messages, by dialect
ENGINE_NAMES = {DUCKDB: "DuckDB", POSTGRES: "PostgreSQL", SPARK: "Spark"}

#: the stock sqlglot dialect that reads each engine's SQL back
STOCK_DIALECTS = {DUCKDB: "duckdb", POSTGRES: "postgres", SPARK: "spark"}


def engine_name(dialect: str) -> str:
    """A human name for the engine behind ``dialect`` (e.g. ``"PostgreSQL"``)."""
    return ENGINE_NAMES.get(dialect, dialect)
