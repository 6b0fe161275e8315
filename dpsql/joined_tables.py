"""A join in a private aggregation's FROM clause → one *joined relation*, read by the pipeline as a table.

``SELECT c.region, COUNT(*) FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region`` reads the
relation ``visits v JOIN clinics c``: a :class:`JoinedTable`, whose columns are named ``v.person_id``,
``v.cost``, ``c.region``, … and whose rows are built in the backend (the join is pushed into the engine, in
the backend's dialect). Everything after that — compiling, planning, the one bounded read, the release,
reuse keyed by the relation — is what any table goes through. The checks (:func:`joined_table`) use the
schemas and the statement only, and public tables' rows (they are public); nothing private is read.

**Joins allowed** (``dpsql.schema``, "Joins"):

* private ⋈ public, inner or LEFT, on a declared foreign key (``visits.clinic_id → clinics.id``), and public ⋈
  public on any columns; ``IN (SELECT id FROM clinics WHERE …)`` is a semi-join on such a key;
* private ⋈ private along the privacy unit: each JOIN that adds a private table equates its unit column with the
  unit column of a private table before it, and both tables protect the same units (Google's rule for DP SQL);
  other equalities between the two may come with it. Self-joins on the unit are such joins.

Refused, with what to declare or write instead: a join of private tables not through the unit, a CROSS JOIN, a
join of a private table with a public one on a column that is not a declared key, a LEFT JOIN that keeps rows
of a public table with no private row, a public table that only the engine of shells holds.

**The rows, and what one unit contributes.**

* The private tables' rows: each private table's rows pass its own domain tests first. One private table: its
  bounded rows, kept once per registration (``dpsql.bounded_tables``). Several: their join, then at most
  ``m = Π max_rows_per_unit`` joined rows per unit by the salted order — the *bounded rows of the private join*,
  a fixed table per registration of its tables, kept like a table's. Each unit's joined rows come from that
  unit's own rows only (the join equates units), so the argument of ``docs/architecture.md`` ("Bounded rows")
  holds as it is: a neighbour differs by one unit's at most ``m`` rows.
* Public tables are joined to those rows (after bounding, as a WHERE applies after bounding). A private row
  meets at most ``F`` rows of a public table on its key, ``F`` the most rows one key value has there (1 for a
  unique key), computed from the public table or declared with the key (``max_rows``) — and enforced in the engine (no more than ``F`` rows of a key
  are joined), so the bound holds whatever the table holds at the read. One unit then contributes at most
  ``m · Π F`` rows: the relation's ``max_rows_per_unit``, which prices every statement over it.
* Columns: a private table's columns keep their declared domains (nullable after a LEFT JOIN); a public
  table's columns have their declared domains, else the table's own values (public) and NULL where a LEFT JOIN
  finds no row; an ``IN (SELECT …)`` adds a BOOLEAN column ``matched`` (NULL when the key is NULL).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sqlglot import exp

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.relations import find_table, unit_root
from dpsql.schema import ColumnDomain, Schema
from dpsql.sql.bounded_rows import LEVEL_NAME, TOP_LEVEL_NAME, in_domain
from dpsql.sql.joins import MATCHED, Join, JoinSpec, Source
from dpsql.sql.literals import ColumnType, python_value
from dpsql.sql.parse import names_table
from dpsql.table import Table

REFERENCE = "docs/sql.md"
MAX_PUBLIC_VALUES = 1 << 20  # a public column with more distinct values gets no domain (like an undeclared column)
BOOLEAN = ColumnType.of("BOOLEAN", "duckdb")
PRIVATE_ROWS = "__dpsql_private"  # the private rows' alias in the joined relation's SQL
_RANK = "__dpsql_rank"
_KEY = "__dpsql_key"
Run = Callable[[str], Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class PublicJoin:
    """A public table joined to the private rows: on ``pairs`` (a column of the relation, a column of the table)."""

    source: Source
    table: Table
    kind: str  # "inner", "left" or "semi"
    pairs: tuple[tuple[str, str], ...]
    fan_out: int  # the most rows of the table one key value has (1 for a semi-join: its keys are distinct)
    declared: bool = False  # the fan-out is the schema's (``max_rows`` of a foreign key), not computed from the table


@dataclass(frozen=True, eq=False)
class JoinedTable(Table):
    """A joined relation (module doc). ``private``: the table whose bounded rows it reads (a registered table, or the
    join of several, :class:`PrivateJoin`); ``renamed``: those rows' columns and their names here."""

    private: Table
    renamed: tuple[tuple[str, str], ...]
    public_joins: tuple[PublicJoin, ...]
    tables: frozenset[str]  # the registered tables it reads, lower case
    private_bound: int  # m: rows per unit of the private rows

    def rows(self, private_rows: str | exp.Query) -> exp.Select:
        """The relation's rows, given the private part's bounded rows: the relation that keeps them, or their query."""
        projections: list[exp.Expression] = [
            exp.alias_(exp.column(column, table=PRIVATE_ROWS, quoted=True), name, quoted=True) for column, name in self.renamed
        ]
        alias = exp.to_identifier(PRIVATE_ROWS, quoted=True)
        if isinstance(private_rows, str):
            source: exp.Expression = exp.Table(this=exp.to_identifier(private_rows, quoted=True), alias=exp.TableAlias(this=alias))
        else:
            source = private_rows.subquery(alias)
        query = exp.select(*projections).from_(source)
        for join in self.public_joins:
            query = _public_join(query, join, self._reference)
            key = join.source.key
            if join.kind == "semi":
                left = self._reference(join.pairs[0][0])
                matched = exp.Case().when(left.is_(exp.null()), exp.null()).when(exp.column(_KEY, table=key, quoted=True).is_(exp.null()), exp.false()).else_(exp.true())
                query = query.select(exp.alias_(matched, f"{key}.{MATCHED}", quoted=True))
            else:
                query = query.select(*(exp.alias_(exp.column(c, table=key, quoted=True), f"{key}.{c}", quoted=True) for c in join.table.column_types))
        return query

    def _reference(self, name: str) -> exp.Expression:
        """A column of the relation inside its own SQL: the private rows' column, or a joined public table's."""
        for column, renamed in self.renamed:
            if renamed == name:
                return exp.column(column, table=PRIVATE_ROWS, quoted=True)
        key, column = name.split(".", 1)
        return exp.column(column, table=key, quoted=True)

    @property
    def fan_out(self) -> int:
        return math.prod(j.fan_out for j in self.public_joins)

    def bounding(self) -> str:
        schema = self.schema
        fans = [f"{j.fan_out} row(s) of {j.table.name} per key{' (declared)' if j.declared else ''}" for j in self.public_joins if j.fan_out > 1]
        unit = f"at most {self.private_bound} row(s) per {schema.privacy_unit!r} after the private joins" if schema.privacy_unit else "one row = one unit"
        return f"{unit}" + (f", each meeting at most {', '.join(fans)}" if fans else "") + f" (the joined relation {self.name})"


@dataclass(frozen=True, eq=False)
class PrivateJoin(Table):
    """Several private tables joined along their unit, as one table whose bounded rows are kept (module doc)."""

    tables: frozenset[str]


def joined_table(spec: JoinSpec, private: Sequence[Table], public: Mapping[str, Table | None], run: Run, dialect: str) -> JoinedTable:
    """The relation ``spec`` reads (module doc), checked against the schemas. ``public``: the public tables by lower-case
    name (None: held by the engine of shells only); ``run`` reads public tables (their fan-outs and values)."""
    tables = {source.key: _table(source, private, public) for source in spec.sources}
    privates = [s for s in spec.sources if not tables[s.key].schema.public]
    if not privates:
        raise NotSupportedError(
            f"FROM {spec.describe()}: the join reads no private table; dpsql answers aggregations of private tables: join one, or read "
            "the public tables in their own database (they are not protected)"
        )
    order = _ordered(spec, tables)
    first = order[0][0]
    private_joins = [(source, join) for source, join in order[1:] if not tables[source.key].schema.public]
    registered = [*private, *(t for t in public.values() if t is not None)]
    for position, (source, join) in enumerate(order[1:], start=1):
        _check_join(source, join, tables, {s.key for s, _ in order[:position]}, registered)
    part, renamed, bound = _private_part(first, private_joins, tables, dialect)
    unit = f"{first.key}.{tables[first.key].schema.privacy_unit}" if tables[first.key].schema.privacy_unit else None
    public_joins = tuple(_public(source, join, tables, run, dialect) for source, join in order[1:] if tables[source.key].schema.public)
    contributions = bound * math.prod(j.fan_out for j in public_joins)
    private_keys = [first.key, *(s.key for s, _ in private_joins)]
    left_joined = {s.key for s, j in order[1:] if j.kind in ("left", "semi")}
    columns: list[ColumnDomain] = []
    types: dict[str, ColumnType] = {}
    for key in private_keys:
        table = tables[key]
        for name, column_type in table.column_types.items():
            types[f"{key}.{name}"] = column_type
        for domain in table.schema.columns:
            if domain.name in table.column_types:
                columns.append(dataclasses.replace(domain, name=f"{key}.{domain.name}", nullable=domain.nullable or (key in left_joined and domain.is_known)))
    for join in public_joins:
        key = join.source.key
        if join.kind == "semi":
            types[f"{key}.{MATCHED}"] = BOOLEAN
            columns.append(ColumnDomain(f"{key}.{MATCHED}", "categories", (False, True), nullable=True))
            continue
        for name, column_type in join.table.column_types.items():
            types[f"{key}.{name}"] = column_type
            domain = _public_domain(join.table, name, run, dialect, nullable=join.kind == "left")
            if domain is not None:
                columns.append(dataclasses.replace(domain, name=f"{key}.{name}"))
    groups = max(tables[k].schema.max_groups_per_unit for k in private_keys)
    schema = Schema(unit, contributions, tuple(columns), max_groups_per_unit=groups, choose_bound=part.schema.choose_bound)
    read = frozenset(t.name.lower() for t in tables.values())
    return JoinedTable(spec.describe(), "", schema, types, part.salt, part, renamed, public_joins, read, bound)


def _table(source: Source, private: Sequence[Table], public: Mapping[str, Table | None]) -> Table:
    found = find_table(source.table, private)
    if found is not None:
        if source.filter is not None or source.key.startswith("__dpsql_in"):
            raise NotSupportedError(
                f"IN (SELECT … FROM {source.table}): the subquery reads a private table; it may read a public table only (a semi-join on "
                f"a declared key); aggregate {source.table} on its own; see {REFERENCE}"
            )
        return found
    path = tuple(source.table.lower().split("."))
    names = [name for name in public if names_table(path, tuple(name.split(".")))]
    if len(names) == 1:
        table = public[names[0]]
        if table is None:
            raise NotSupportedError(
                f"JOIN {source.table}: the public table is held by the engine of released rows only (the backend cannot load it); load it "
                "into the backend's database and register it by name (connection.register(name, public=True)) to join it with private rows"
            )
        return table
    registered = sorted([t.name for t in private] + [n for n in public])
    raise ProgrammingError(f"FROM: unknown table {source.table!r}; use a registered table {registered}")


def _ordered(spec: JoinSpec, tables: Mapping[str, Table]) -> list[tuple[Source, Join]]:
    """The sources in the order the relation joins them, each with the JOIN that adds it (the first: None): as
    written when the first is private; an inner join written from a public table is re-rooted at the first
    private table (inner joins and semi-joins do not depend on the order); LEFT JOINs keep their order."""
    is_private = {k: not t.schema.public for k, t in tables.items()}
    joins = list(spec.joins)
    resolved = [dataclasses.replace(j, pairs=tuple(_using(p, j, spec, tables) for p in j.pairs)) for j in joins]
    if is_private[spec.first.key]:
        return [(spec.first, None), *((j.source, j) for j in resolved)]  # type: ignore[list-item]
    if any(j.kind == "left" for j in resolved):
        raise NotSupportedError(
            f"FROM {spec.describe()}: a LEFT JOIN from the public table {spec.first.table} would keep its rows that no private row "
            f"joins; write the private table first (FROM <private> JOIN {spec.first.table} …), or an inner JOIN; see {REFERENCE}"
        )
    for join in resolved:
        if join.kind == "cross":
            _refuse_cross(join.source, tables)
    pairs = [(a, x, b, y) for j in resolved for a, x, b, y in j.pairs]
    kinds = {j.source.key: j.kind for j in resolved}
    sources = {s.key: s for s in spec.sources}
    start = next(s for s in spec.sources if is_private[s.key])
    order: list[tuple[Source, Join]] = [(start, None)]  # type: ignore[list-item]
    added = {start.key}
    while len(added) < len(sources):
        for key in sources:
            if key in added:
                continue
            linking = [(a, x, b, y) for a, x, b, y in pairs if b == key and a in added]
            linking += [(b, y, a, x) for a, x, b, y in pairs if a == key and b in added]
            if linking:
                kind = kinds.get(key, "inner")
                order.append((sources[key], Join(sources[key], "semi" if kind == "semi" else "inner", tuple(linking))))
                added.add(key)
                break
        else:
            missing = sorted(set(sources) - added)
            raise NotSupportedError(f"FROM {spec.describe()}: {missing} are not joined to the private table on keys; join them on declared keys")
    return order


def _using(pair: tuple[str | None, str, str, str], join: Join, spec: JoinSpec, tables: Mapping[str, Table]) -> tuple[str, str, str, str]:
    """``USING (c)``: the one source before the JOIN that has ``c``."""
    left, column, right, other = pair
    if left is not None:
        return (left, column, right, other)
    before = [s.key for s in spec.sources[: spec.sources.index(join.source)] if column in tables[s.key].column_types]
    if len(before) != 1:
        raise ProgrammingError(f"JOIN {join.source.table} USING ({column}): {'no' if not before else 'more than one'} table before it has the column {column!r}; write ON a.{column} = b.{column}")
    return (before[0], column, right, other)


def _refuse_cross(source: Source, tables: Mapping[str, Table]) -> None:
    what = "private tables" if not tables[source.key].schema.public else f"a private table with {source.table}"
    raise NotSupportedError(
        f"a CROSS JOIN (or a JOIN without ON) of {what} pairs every row with every row of {source.table}: join it ON its declared key "
        f"(a private table along the privacy unit, a public one on a foreign key); see {REFERENCE}"
    )


def _check_join(source: Source, join: Join, tables: Mapping[str, Table], before: set[str], registered: Sequence[Table]) -> None:
    table = tables[source.key]
    if join.kind == "cross":
        _refuse_cross(source, tables)
    for left, column, _, other in join.pairs:
        if left not in before:
            raise ProgrammingError(f"JOIN {source.table}: {left!r} is not a table or alias joined before it in FROM")
        for key, name in ((left, column), (source.key, other)):
            if name not in tables[key].column_types:
                raise ProgrammingError(f"JOIN {source.table}: {tables[key].name!r} has no column {name!r}; its columns are {list(tables[key].column_types)}")
    if not table.schema.public:
        _check_private_join(source, join, tables, registered)
        return
    for left, column, _, other in join.pairs:
        owner = tables[left]
        if owner.schema.public:
            continue
        key = owner.schema.foreign_key(column)
        if key is None or find_table(key.table, [table]) is not table or key.referenced != other:
            raise NotSupportedError(
                f"JOIN {source.table}: {left}.{column} = {source.key}.{other} is not a declared key; joins of a private table use its declared "
                f"foreign keys: declare foreign_keys: {{{column}: {table.name}.{other}}} in the schema of {owner.name!r}"
            )


def _check_private_join(source: Source, join: Join, tables: Mapping[str, Table], everything: Sequence[Table]) -> None:
    table = tables[source.key]
    unit = table.schema.privacy_unit
    if unit is None:
        raise NotSupportedError(
            f"JOIN {source.table}: the table has no privacy unit column (one row is one unit), so it joins public tables only; declare its "
            f"privacy unit to join it with other private tables along that unit"
        )
    along = []
    for left, column, _, other in join.pairs:
        owner = tables[left]
        if owner.schema.public:
            raise NotSupportedError(
                f"JOIN {source.table}: the private table is joined to the public table {owner.name!r}; join a private table along the privacy "
                f"unit to a private table before it, and public tables on their own JOIN; see {REFERENCE}"
            )
        if column == owner.schema.privacy_unit and other == unit:
            if unit_root(owner, everything) != unit_root(table, everything):
                raise NotSupportedError(
                    f"JOIN {source.table}: {owner.name!r} and {table.name!r} do not declare the same privacy unit; declare their unit columns as "
                    f"foreign keys to the table that holds the units (e.g. foreign_keys: {{{unit}: persons.id}}), or to each other"
                )
            along.append((left, column))
    if not along:
        others = [k for k, t in tables.items() if not t.schema.public and k != source.key and t.schema.privacy_unit]
        example = f"{source.key}.{unit} = {others[0]}.{tables[others[0]].schema.privacy_unit}" if others else f"{source.key}.{unit} = …"
        raise NotSupportedError(
            f"JOIN {source.table}: a join between private tables must go through the privacy unit (each unit's rows then join only its own "
            f"rows); write the join ON {example}"
        )


def _private_part(first: Source, joins: list[tuple[Source, Join]], tables: Mapping[str, Table], dialect: str) -> tuple[Table, tuple[tuple[str, str], ...], int]:
    """The private rows: one registered table, or the join of several (a :class:`PrivateJoin`); how the relation names
    their columns; and ``m``, the rows per unit they keep."""
    head = tables[first.key]
    if not joins:
        levels = ((LEVEL_NAME, LEVEL_NAME), (TOP_LEVEL_NAME, TOP_LEVEL_NAME)) if head.schema.choose_bound else ()
        return head, tuple((c, f"{first.key}.{c}") for c in head.column_types) + levels, head.schema.max_rows_per_unit
    keys = [first.key, *(s.key for s, _ in joins)]
    query = exp.select(*(
        exp.alias_(exp.column(c, table=k, quoted=True), f"{k}.{c}", quoted=True) for k in keys for c in tables[k].column_types
    )).from_(_filtered(tables[first.key], first.key))
    for source, join in joins:
        condition = exp.and_(*(
            exp.EQ(this=exp.column(c, table=left, quoted=True), expression=exp.column(o, table=source.key, quoted=True)) for left, c, _, o in join.pairs
        ))
        query = query.join(_filtered(tables[source.key], source.key), on=condition, join_type="LEFT" if join.kind == "left" else "INNER")
    bound = math.prod(tables[k].schema.max_rows_per_unit for k in keys)
    types = {f"{k}.{c}": t for k in keys for c, t in tables[k].column_types.items()}
    unit = f"{first.key}.{head.schema.privacy_unit}"
    salt = int.from_bytes(hashlib.sha256(repr((sorted(tables[k].salt for k in keys), query.sql(dialect="duckdb"))).encode()).digest()[:8], "big") >> 2
    name = " ⋈ ".join(f"{tables[k].name} {k}" for k in keys)
    chooses = any(tables[k].schema.choose_bound for k in keys)
    part = PrivateJoin(name, query, Schema(unit, bound, (), choose_bound=chooses), types, salt, frozenset(tables[k].name.lower() for k in keys))
    return part, tuple((c, c) for c in types) + (((LEVEL_NAME, LEVEL_NAME), (TOP_LEVEL_NAME, TOP_LEVEL_NAME)) if chooses else ()), bound


def _filtered(table: Table, key: str) -> exp.Expression:
    """A private table's rows that pass its domain tests and have a unit, as the FROM source ``key``."""
    tests = [in_domain(exp.column(n, quoted=True), d, table.column_types[n]) for n, d in table.declared_columns().items()]
    if table.schema.privacy_unit is not None:
        tests.append(exp.column(table.schema.privacy_unit, quoted=True).is_(exp.null()).not_())
    rows = exp.select(exp.Star()).from_(_named(table.relation))
    if tests:
        rows = rows.where(exp.and_(*tests))
    return rows.subquery(exp.to_identifier(key, quoted=True))


def _named(relation: str | exp.Query) -> exp.Expression:
    return exp.Table(this=exp.to_identifier(relation, quoted=True)) if isinstance(relation, str) else relation.subquery("__dpsql_relation")


def _public(source: Source, join: Join, tables: Mapping[str, Table], run: Run, dialect: str) -> PublicJoin:
    table = tables[source.key]
    pairs = tuple((f"{left}.{column}", other) for left, column, _, other in join.pairs)
    if join.kind == "semi":
        return PublicJoin(source, table, join.kind, pairs, 1)
    declared = [
        key.max_rows for left, column, _, other in join.pairs
        if (key := tables[left].schema.foreign_key(column)) is not None and key.max_rows is not None
        and key.referenced == other and find_table(key.table, [table]) is table
    ]
    if declared:  # each declared key bounds the rows one value meets; together they bound them by the least
        return PublicJoin(source, table, join.kind, pairs, min(declared), declared=True)
    return PublicJoin(source, table, join.kind, pairs, _fan_out(table, tuple(other for _, other in pairs), run, dialect))


def _public_rows(table: Table, where: str | None = None) -> exp.Select:
    """A public table's rows within its declared domains (and a semi-join's filter)."""
    tests = [in_domain(exp.column(n, quoted=True), d, table.column_types[n]) for n, d in table.declared_columns().items()]
    if where is not None:
        tests.append(exp.paren(exp.maybe_parse(where, dialect="duckdb")))
    rows = exp.select(exp.Star()).from_(_named(table.relation))
    return rows.where(exp.and_(*tests)) if tests else rows


def _fan_out(table: Table, keys: tuple[str, ...], run: Run, dialect: str) -> int:
    """The most rows one value of ``keys`` has in the public table (at least 1)."""
    columns = [exp.column(k, quoted=True) for k in keys]
    counts = exp.select(exp.alias_(exp.Count(this=exp.Star()), "n")).from_(_public_rows(table).subquery("rows"))
    counts = counts.where(exp.and_(*(c.copy().is_(exp.null()).not_() for c in columns))).group_by(*columns)
    most = exp.select(exp.alias_(exp.Max(this=exp.column("n")), "most")).from_(counts.subquery("counts"))
    value = np.ma.filled(run(most.sql(dialect=dialect))["most"], 0)
    return max(1, int(value[0]) if len(value) else 1)


def _public_domain(table: Table, column: str, run: Run, dialect: str, nullable: bool) -> ColumnDomain | None:
    """A public column's declared domain, else its values in the table (None beyond :data:`MAX_PUBLIC_VALUES`)."""
    declared = table.schema.column(column)
    if declared.is_known:
        return dataclasses.replace(declared, nullable=declared.nullable or nullable)
    reference = exp.column(column, quoted=True)
    distinct = exp.select(exp.alias_(reference, "v")).distinct().from_(_public_rows(table).subquery("rows")).limit(MAX_PUBLIC_VALUES + 2)
    found = run(distinct.sql(dialect=dialect))["v"]
    values = [python_value(v, table.column_types[column]) for v, masked in zip(np.ma.getdata(found), np.ma.getmaskarray(found)) if not masked]
    values = [v for v in values if v is not None]
    has_null = len(values) < len(found)
    if len(values) > MAX_PUBLIC_VALUES or len({type(v) for v in values}) > 1:
        return None
    return ColumnDomain(column, "categories", tuple(sorted(values)), nullable=nullable or has_null) if values else None


def _public_join(query: exp.Select, join: PublicJoin, reference: Callable[[str], exp.Expression]) -> exp.Select:
    """``query`` joined with the public table: at most ``fan_out`` of its rows per key value (enforced), or, for a
    semi-join, its distinct filtered keys."""
    key = join.source.key
    table = join.table
    keys = [exp.column(other, quoted=True) for _, other in join.pairs]
    if join.kind == "semi":
        rows = exp.select(exp.alias_(keys[0], _KEY, quoted=True)).distinct().from_(_public_rows(table, join.source.filter).subquery("rows"))
        rows = rows.where(keys[0].copy().is_(exp.null()).not_())
        condition = exp.EQ(this=reference(join.pairs[0][0]), expression=exp.column(_KEY, table=key, quoted=True))
        return query.join(rows.subquery(exp.to_identifier(key, quoted=True)), on=condition, join_type="LEFT")
    order = exp.Order(expressions=[exp.Ordered(this=exp.column(c, quoted=True)) for c in table.column_types])  # Spark wants one; any order will do
    rank = exp.Window(this=exp.RowNumber(), partition_by=[k.copy() for k in keys], order=order)
    ranked = exp.select(exp.Star(), exp.alias_(rank, _RANK, quoted=True)).from_(_public_rows(table).subquery("rows"))
    kept = exp.select(*(exp.column(c, quoted=True) for c in table.column_types)).from_(ranked.subquery("ranked"))
    kept = kept.where(exp.column(_RANK, quoted=True) <= exp.Literal.number(join.fan_out))
    condition = exp.and_(*(exp.EQ(this=reference(mine), expression=exp.column(other, table=key, quoted=True)) for mine, other in join.pairs))
    return query.join(kept.subquery(exp.to_identifier(key, quoted=True)), on=condition, join_type="LEFT" if join.kind == "left" else "INNER")
