"""A private aggregation's FROM clause with joins, as written: which tables, how joined, on which columns.

``FROM visits v JOIN clinics c ON v.clinic_id = c.id LEFT JOIN persons p ON p.id = v.person_id`` becomes a
:class:`JoinSpec` — its sources (each named by its alias, else its table's name) and, per JOIN, its kind and
the column equalities of its ``ON`` (or ``USING``). A ``WHERE v.clinic_id IN (SELECT id FROM clinics WHERE
region = 'north')`` becomes one more source, a *semi-join* of that table filtered by the subquery's WHERE: the
predicate is then ``<source>.matched = TRUE``, a boolean column of the joined relation. This module reads the
syntax only; whether the tables exist, which are private, and whether the keys are declared is checked in
prepare (:mod:`dpsql.joined_tables`), against the schemas.

Refused here, whatever the schemas: RIGHT and FULL joins, ``ON`` conditions other than column equalities joined
by AND, joins of subqueries or table functions, ``IN (SELECT …)`` of anything but one column of one table
filtered by literal comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import NotSupportedError

SEMI_PREFIX = "__dpsql_in"  # the key of an IN (SELECT …) source
MATCHED = "matched"  # its boolean column: the row's key is among the subquery's
_REFERENCE = "docs/sql.md"
_FILTER_NODES = (
    exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Neg, exp.Paren, exp.And, exp.Or, exp.Not,
    exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.In, exp.Between, exp.Is, exp.Tuple,
)


@dataclass(frozen=True)
class Source:
    """One table of a join: ``key`` qualifies its columns (its alias, else its table's name, lower case)."""

    key: str
    table: str  # as written, qualifiers joined by '.'
    filter: str | None = None  # a semi-join's WHERE, DuckDB SQL over the table's own columns
    column: str | None = None  # a semi-join's selected column


@dataclass(frozen=True)
class Join:
    """One JOIN: the source it adds, its kind, and the equalities ``(left key, left column, right key, right
    column)`` of its condition (``USING`` leaves the left key to prepare: None)."""

    source: Source
    kind: str  # "inner", "left", "cross" or "semi"
    pairs: tuple[tuple[str | None, str, str, str], ...]


@dataclass(frozen=True)
class JoinSpec:
    first: Source
    joins: tuple[Join, ...]

    @property
    def sources(self) -> tuple[Source, ...]:
        return (self.first, *(j.source for j in self.joins))

    def describe(self) -> str:
        """The join as a reader writes it (messages, EXPLAIN)."""
        parts = [_named(self.first)]
        for join in self.joins:
            if join.kind == "semi":
                parts.append(f"⋉ {join.source.table} ({join.source.column})")
                continue
            on = " AND ".join(f"{a or '?'}.{x} = {b}.{y}" for a, x, b, y in join.pairs)
            word = {"inner": "JOIN", "left": "LEFT JOIN", "cross": "CROSS JOIN"}[join.kind]
            parts.append(f"{word} {_named(join.source)}" + (f" ON {on}" if on else ""))
        return " ".join(parts)


def _named(source: Source) -> str:
    return source.table if source.key == source.table.split(".")[-1].lower() else f"{source.table} {source.key}"


def join_spec(select: exp.Select, first: exp.Table) -> JoinSpec:
    """The FROM clause's joins (``first`` is its table); raises for what no schema could make acceptable."""
    start = _source(first)
    joins = []
    keys = {start.key}
    for node in select.args.get("joins") or ():
        table = node.this
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
            raise NotSupportedError(
                f"JOIN {table.sql(dialect='duckdb')[:60]!r}: a private aggregation joins registered tables, not subqueries or "
                f"functions; aggregate the subquery on its own and join the released rows; see {_REFERENCE}"
            )
        source = _source(table)
        if source.key in keys:
            raise NotSupportedError(f"JOIN {source.table}: the name {source.key!r} is used twice in FROM; give each table its own alias")
        side = str(node.args.get("side") or "").upper()
        if side in ("RIGHT", "FULL"):
            raise NotSupportedError(
                f"{side} JOIN {source.table} is not supported: write the private tables first and LEFT JOIN the others (a private "
                f"aggregation counts rows of its private tables); see {_REFERENCE}"
            )
        if node.args.get("method") or node.args.get("laterals"):
            raise NotSupportedError(f"{str(node.args.get('method')).upper()} JOIN is not supported: write JOIN … ON the declared keys")
        on, using = node.args.get("on"), node.args.get("using")
        if on is not None:
            pairs = _equalities(on, source.key)
        elif using:
            pairs = tuple((None, u.name, source.key, u.name) for u in using)
        else:
            pairs = ()
        kind = "left" if side == "LEFT" else ("inner" if pairs else "cross")
        joins.append(Join(source, kind, pairs))
        keys.add(source.key)
    return JoinSpec(start, tuple(joins))


def semi_join(node: exp.In, column: tuple[str | None, str], index: int) -> Join:
    """``<column> IN (SELECT c FROM t [WHERE …])`` as a semi-join source of key ``__dpsql_in<index>``."""
    query = node.args["query"]
    select = query.this if isinstance(query, exp.Subquery) else query
    table = select.args.get("from_").this if isinstance(select, exp.Select) and select.args.get("from_") else None
    shown = node.sql(dialect="duckdb")[:80]
    if (
        not isinstance(select, exp.Select) or not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier)
        or len(select.expressions) != 1 or not isinstance(select.expressions[0], exp.Column)
        or any(select.args.get(a) for a in select.args if a not in ("expressions", "from_", "where", "distinct"))
    ):
        raise NotSupportedError(
            f"WHERE {shown!r}: IN (SELECT …) takes one column of one public table, filtered by a WHERE of comparisons with "
            f"literals (SELECT id FROM clinics WHERE region = 'north'); see {_REFERENCE}"
        )
    where = select.args.get("where")
    if where is not None:
        for part in where.this.walk():
            if not isinstance(part, _FILTER_NODES) or (isinstance(part, exp.In) and part.args.get("query")):
                raise NotSupportedError(
                    f"WHERE {shown!r}: the subquery's WHERE may compare its table's columns with literals (=, <, IN, BETWEEN, IS "
                    f"NULL, AND, OR, NOT) only; see {_REFERENCE}"
                )
        filtered = where.this.copy()
        for reference in filtered.find_all(exp.Column):
            reference.set("table", None)
            reference.set("db", None)
            reference.set("catalog", None)
        text = filtered.sql(dialect="duckdb")
    else:
        text = None
    path = table_path(table)
    key = f"{SEMI_PREFIX}{index}"
    selected = select.expressions[0].name
    source = Source(key, ".".join(path), text, selected)
    return Join(source, "semi", ((column[0], column[1], key, selected),))


def _source(table: exp.Table) -> Source:
    path = table_path(table)
    return Source((table.alias or path[-1]).lower(), ".".join(path))


def _equalities(condition: exp.Expression, right: str) -> tuple[tuple[str | None, str, str, str], ...]:
    """``a.x = b.y [AND …]``: each as (left key, left column, right key, right column), the joined table on the right."""
    pairs = []
    for part in condition.flatten() if isinstance(condition, exp.And) else [condition]:
        part = part.unnest()
        if not (isinstance(part, exp.EQ) and isinstance(part.this, exp.Column) and isinstance(part.expression, exp.Column)):
            raise NotSupportedError(
                f"JOIN … ON {condition.sql(dialect='duckdb')[:80]!r}: a join condition equates declared keys (a.key = b.key, "
                f"joined by AND); move other conditions to WHERE; see {_REFERENCE}"
            )
        ends = [(_qualifier(part.this), part.this.name), (_qualifier(part.expression), part.expression.name)]
        if ends[0][0] == right:
            ends.reverse()
        (left_key, left_column), (right_key, _) = ends
        if left_key is None or right_key != right or left_key == right:
            raise NotSupportedError(
                f"JOIN … ON {part.sql(dialect='duckdb')[:80]!r}: qualify both columns with their tables' names or aliases "
                f"(v.clinic_id = c.id), one of them the table this JOIN adds"
            )
        right_column = ends[1][1]
        pairs.append((left_key, left_column, right, right_column))
    return tuple(pairs)


def _qualifier(column: exp.Column) -> str | None:
    qualifier = column_qualifier(column)
    return qualifier[-1].lower() if qualifier else None


def table_path(table: exp.Table) -> tuple[str, ...]:
    """A table reference's name with its qualifiers: ``(catalog, schema, name)``, as far as written."""
    return tuple(part.name for part in (table.args.get("catalog"), table.args.get("db"), table.this) if part is not None and part.name)


def column_qualifier(column: exp.Column) -> tuple[str, ...]:
    """What qualifies a column reference: ``(catalog, schema, table)``, as far as written (``()``: none)."""
    return tuple(part.name for part in (column.args.get("catalog"), column.args.get("db"), column.args.get("table")) if part is not None and part.name)
