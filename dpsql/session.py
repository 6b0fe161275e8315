"""What one connection holds: the backend, the ledger, the registered tables, and what was released.

A :class:`Session` owns every piece of state a statement may consult or change — the tables and their
checked schemas, the budget ledger, the kept measurements (``planner.store``), the released key sets of
columns without a declared domain (``dpsql.keys``), and a cache of plans — plus the connection's
settings. ``dpsql.pipeline`` is the only code that runs statements against it; ``dpsql.connection`` is a
thin DB-API facade over the two.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlglot import exp

import planner
from dpsql import progress, testing
from dpsql.accountant import Budget, Cost, Ledger
from dpsql.backends.base import Backend
from dpsql.bounded_tables import BoundedTables
from dpsql.backends.dialects import engine_name
from dpsql.errors import InterfaceError, NotSupportedError, ProgrammingError
from dpsql.keys import ReleasedKeys
from dpsql.post_processing import PublicEngine
from dpsql.joined_tables import JoinedTable, PrivateJoin, joined_table
from dpsql.relations import check_keys
from dpsql.schema import Schema
from dpsql.table import Table
from dpsql.sql.literals import ColumnType, canonical_schema
from dpsql.sql.joins import JoinSpec
from dpsql.sql.parse import Query, names_table
from dpsql.sql.settings import TextCost
from dpsql.sql.statement import Statement
from planner import MeasurementStore

NOISE_FAMILIES = ("laplace", "gaussian")
EXCLUDED_CELLS = ("omit", "zeros")
PLAN_CACHE_SIZE = 64  # plans kept per session (least recently used evicted)
MEMO_SIZE = 256  # results of Session.memoised kept per session
_MISSING = object()
_ATOMS = frozenset({str, int, float, bool, type(None), bytes})
T = TypeVar("T")
DEFAULT_SELECTION_DELTA_SHARE = 0.1  # of the budget's δ, spent by one key selection unless configured


@dataclass(frozen=True)
class Settings:
    """A connection's choices (``dpsql.connect`` documents each)."""

    noise: str = "laplace"
    default_epsilon: float | None = None
    reuse: bool = True
    non_negative: bool = False
    selection_delta: float | None = None
    excluded_cells: str = "omit"  # GROUP BY cells the WHERE clause excludes: "omit" them, or show them as exact "zeros"
    stderr_columns: bool = False  # every result carries <column>_stderr after each released column

    def __post_init__(self) -> None:
        if self.noise not in NOISE_FAMILIES:
            raise ProgrammingError(f"noise must be one of {NOISE_FAMILIES}, got {self.noise!r}")
        if self.excluded_cells not in EXCLUDED_CELLS:
            raise ProgrammingError(f"excluded_cells must be one of {EXCLUDED_CELLS}, got {self.excluded_cells!r}")
        for name in ("reuse", "non_negative", "stderr_columns"):
            if not isinstance(getattr(self, name), bool):
                raise ProgrammingError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.default_epsilon is not None:
            Cost.pure(self.default_epsilon)  # validates
        delta = self.selection_delta
        if delta is not None and (isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 <= delta < 1):
            raise ProgrammingError(f"selection_delta must be a number in [0, 1) or None, got {delta!r}")


def check_name(name: object) -> None:
    """A table's name: an identifier, optionally qualified by a schema (and a catalog)."""
    if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")) or name.count(".") > 2:
        raise ProgrammingError(
            f"table name must be an identifier, optionally qualified (schema.table, catalog.schema.table), got {name!r}"
        )


class Registrations:
    """The tables registered on one database — private tables (checked schemas, salts), public tables, the joined
    relations statements read — and their kept bounded rows (:mod:`dpsql.bounded_tables`). A connection has its
    own. ``shared``: the sessions of ``dpsql serve`` on its DuckDB database share one, registered once at
    start-up, so every session reads the same registration of a table (its salt, its one kept relation,
    computed by a charged read of any of them)."""

    def __init__(self, backend: Backend, shared: bool = False) -> None:
        self.backend = backend
        self.shared = shared
        self.tables: dict[str, Table] = {}
        self.public_tables: dict[str, Table | None] = {}  # public tables as the backend holds them (None: in the shells' engine only)
        self.public_sources: dict[str, Callable[[PublicEngine], None]] = {}  # how each public table enters a session's engine of shells
        self.joined: dict[JoinSpec, JoinedTable] = {}  # the joined relations statements read (``dpsql.joined_tables``)
        self.bounded = BoundedTables(backend, shared=shared)
        self._lock = threading.Lock()  # sessions sharing the registrations build joined relations one at a time

    def register(self, name: str, source: object, schema: Schema) -> set[str]:
        """Check ``schema`` against the relation's columns and types, cast its domains and check its declared keys
        against the tables registered so far (no rows read); a public table (``public: true``) is made readable by
        statements (joined inside private aggregations, in the backend) and by shells. Returns the names (lower
        case) whose kept measurements no longer answer anything: the table's and those of the joins reading it."""
        check_name(name)
        if schema.public and name.lower() in self.tables:
            raise ProgrammingError(f"{name!r} is a registered private table; give the public table another name")
        if not schema.public and name.lower() in self.public_tables:
            raise ProgrammingError(f"{name!r} is a registered public table; give the private table another name")
        if schema.public:
            self._register_public(name, source, schema)
        else:
            table = self._checked_table(name, self._relation_for(name, source), schema)
            self.bounded.register(table, self.tables.get(name.lower()))
            self.tables[name.lower()] = table
        return {name.lower(), *self._forget_joins(name)}

    def _forget_joins(self, name: str) -> set[str]:
        """A table was registered again: the joined relations that read it are built anew (new salt, new rows); the
        names of the old ones (their kept measurements answer nothing now)."""
        stale = [spec for spec, joined in self.joined.items() if name.lower() in joined.tables]
        names = {self.joined[spec].name.lower() for spec in stale}
        for spec in stale:
            joined = self.joined.pop(spec)
            if isinstance(joined.private, PrivateJoin):
                self.bounded.forget(joined.private)
        return names

    def relation(self, query: Query, table: Callable[[str], Table]) -> Table:
        """The table a private aggregation reads: a registered table (found by ``table``), or the joined relation
        of its FROM clause."""
        if query.join is None:
            return table(query.table)
        with self._lock:
            found = self.joined.get(query.join)
            if found is None:
                found = joined_table(query.join, list(self.tables.values()), self.public_tables, self.backend.run, self.backend.dialect)
                if isinstance(found.private, PrivateJoin):
                    self.bounded.register(found.private, None)
                self.joined[query.join] = found
            return found

    def _checked_table(self, name: str, relation: str, schema: Schema) -> Table:
        """The relation's columns and types checked against ``schema`` (domains cast, declared keys checked)."""
        dialect = self.backend.dialect
        types = {column: ColumnType.of(type_name, dialect) for column, type_name in self.backend.describe(relation).items()}
        self._check_columns(name, schema, types)
        try:
            checked = canonical_schema(schema, types, name, self.backend.run, dialect)
        except ProgrammingError as error:
            raise ProgrammingError(f"{error} (column types as {engine_name(dialect)} reports them)") from None
        table = Table(name, relation, checked, types, 0 if schema.public else testing.bounding_salt())
        check_keys(table, [t for t in self.all_tables() if t.name.lower() != name.lower()])
        return table

    def _register_public(self, name: str, source: object, schema: Schema) -> None:
        """A public table in the backend (private aggregations join it there) and, for every session, in the engine
        of shells. A backend that cannot hold the source (PostgreSQL takes tables by name) leaves it to the shells."""
        from_engine = source is None or (isinstance(source, str) and not Path(source).suffix and self.backend.has_relation(source))  # type: ignore[attr-defined]
        try:
            relation = self._relation_for(name, source)
        except ProgrammingError:
            if from_engine:
                raise
            relation = None
        table = None if relation is None else self._checked_table(name, relation, schema)
        if from_engine:  # a relation of the engine: its rows, read once (they are public) into the engines of shells
            assert table is not None
            everything = exp.select(exp.Star()).from_(exp.Table(this=exp.to_identifier(table.relation, quoted=True)))
            kinds = {c: t.kind for c, t in table.column_types.items()}
            rows = self.backend.run(everything.sql(dialect=self.backend.dialect))
            self.public_sources[name.lower()] = lambda engine: engine.register_rows(name, kinds, rows)
        else:
            self.public_sources[name.lower()] = lambda engine: engine.register(name, source)
        self.public_tables[name.lower()] = table

    def all_tables(self) -> list[Table]:
        """The registered private and public tables."""
        return [*self.tables.values(), *(t for t in self.public_tables.values() if t is not None)]

    def _relation_for(self, name: str, source: object) -> str:
        if source is None:
            return name.split(".")[-1]  # the engine's table of that name (its current schema)
        if isinstance(source, str) and not Path(source).suffix and self.backend.has_relation(source):  # type: ignore[attr-defined]
            return source
        relation = f"__dpsql_{name.replace('.', '__')}"
        self.backend.register(relation, source)  # type: ignore[attr-defined]
        return relation

    def _check_columns(self, name: str, schema: Schema, types: dict[str, ColumnType]) -> None:
        engine = engine_name(self.backend.dialect)
        missing = [c for c in (*schema.key_columns, *schema.column_names) if c not in types]
        if missing:
            raise ProgrammingError(
                f"the schema of {name!r} names column(s) {missing} that the data does not have; its columns in {engine} "
                f"are {list(types)}"
            )

    def close(self) -> None:
        self.bounded.close()


class Session:
    """Tables (and their kept bounded rows), backend, ledger, kept measurements, released keys and cached
    plans of one connection.

    ``registrations``: the tables this session reads, shared with other sessions of the same database
    (default: its own, on ``backend``); ``owns_ledger``: whether closing the session closes the ledger
    (``dpsql serve`` gives all connections of an analyst one ledger, so their charges commit in groups)."""

    def __init__(
        self, backend: Backend, ledger: Ledger, settings: Settings, registrations: Registrations | None = None, owns_ledger: bool = True
    ) -> None:
        self.backend = backend
        self.ledger = ledger
        self.settings = settings
        self.registrations = Registrations(backend) if registrations is None else registrations
        self._owned = (registrations is None, owns_ledger)
        self.store = MeasurementStore()
        self.keys = ReleasedKeys()
        self.said = TextCost(where="SET dpsql")  # the connection's ``SET dpsql.*`` settings (``dpsql.sql.settings``)
        self.public = PublicEngine()  # public tables and the shells over released rows (``dpsql.post_processing``)
        for enter in self.registrations.public_sources.values():
            enter(self.public)
        self.plans = PlanCache()
        self._memo: OrderedDict[Hashable, object] = OrderedDict()
        self.closed = False
        if settings.noise == "gaussian" and ledger.budget.delta == 0:
            raise ProgrammingError("noise='gaussian' needs a budget with delta > 0, e.g. Budget(epsilon=1.0, delta=1e-6)")

    @property
    def budget(self) -> Budget:
        return self.ledger.budget

    @property
    def tables(self) -> dict[str, Table]:
        return self.registrations.tables

    @property
    def public_tables(self) -> dict[str, Table | None]:
        return self.registrations.public_tables

    @property
    def bounded(self) -> BoundedTables:
        return self.registrations.bounded

    def check_open(self) -> None:
        if self.closed:
            raise InterfaceError("the connection is closed")

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            owns_registrations, owns_ledger = self._owned
            if owns_registrations:
                self.registrations.close()
            self.public.close()
            self.backend.close()
            if owns_ledger:
                self.ledger.close()

    # -- tables ------------------------------------------------------------------------------------------
    def register(self, name: str, source: object, schema: object, public: bool = False) -> None:
        """Register a table of this session's own (:meth:`Registrations.register`: what was kept for an earlier
        registration of the name, or for joins reading it, no longer answers anything); a public table
        (``public=True`` or a schema saying ``public: true``) also enters this session's engine of shells: its rows
        are not protected."""
        self.check_open()
        check_name(name)
        parsed = Schema.load(schema) if schema is not None else (Schema.load({"public": True}) if public else None)  # type: ignore[arg-type]
        if parsed is None:
            raise ProgrammingError(f"register({name!r}, ...) needs schema=: a dict, YAML or JSON (see dpsql.schema)")
        if public and not parsed.public:
            raise ProgrammingError(
                f"register({name!r}, ..., public=True) takes no schema, or a public one (public: true, with optional column "
                "domains): a public table's rows are not protected"
            )
        if self.registrations.shared:
            raise ProgrammingError("this session reads tables registered for every session of its server; register them there")
        stale = self.registrations.register(name, source, parsed)
        if parsed.public:
            self.registrations.public_sources[name.lower()](self.public)
        self.store.forget(lambda rows: rows[0] in stale)

    def relation(self, query: Query) -> Table:
        """The table a private aggregation reads: a registered table, or the joined relation of its FROM clause."""
        return self.registrations.relation(query, self.table)

    def public_names(self) -> frozenset[str]:
        """The registered public tables' names, lower case (statements read them in their shells)."""
        return frozenset(self.public_tables)

    def table(self, name: str) -> Table:
        """The registered table a statement names: by its registered name, qualified or not (case-insensitive, as
        DuckDB and unquoted PostgreSQL names), a name qualified by the default schema (``public.t``, ``main.t``,
        ``<catalog>.main.t``), or the unqualified end of one registered qualified name (``t`` for ``s.t``)."""
        found = self.tables.get(name.lower())
        if found is not None:
            return found
        path = tuple(name.lower().split("."))
        matches = [table for key, table in self.tables.items() if names_table(path, tuple(key.split(".")))]
        if len(matches) == 1:
            return matches[0]
        registered = sorted(t.name for t in self.tables.values())
        if name.lower() in self.public_tables or any(names_table(path, tuple(k.split("."))) for k in self.public_tables):
            raise NotSupportedError(
                f"FROM: {name!r} is a public table; a private aggregation reads a private table (joined with public ones as it likes): "
                f"use one of {registered}, or query the public table's own data directly"
            )
        if matches:
            raise ProgrammingError(f"FROM: table {name!r} could be any of {sorted(t.name for t in matches)}; qualify it")
        raise ProgrammingError(
            f"FROM: unknown table {name!r}; use a registered table {registered} "
            "or register one with connection.register(name, source, schema=...)"
        )

    # -- costs and plans ---------------------------------------------------------------------------------
    def cost(self, epsilon: float | None, rho: float | None, said: TextCost = TextCost()) -> Cost | None:
        """The cost a statement asks for: ``epsilon=`` or ``rho=`` of the call, else what its text ``said``
        (``dpsql.sql.settings``), else the connection's ``SET dpsql.*``, else the default; None when none is given."""
        if epsilon is not None and rho is not None:
            raise ProgrammingError("give the statement's cost as epsilon= or rho=, not both")
        if epsilon is None and rho is None:
            chosen = said.before(self.said)
            epsilon, rho = chosen.epsilon, chosen.rho
        elif said.given and (said.epsilon, said.rho) != (epsilon, rho):
            raise ProgrammingError(
                f"the statement's cost is given twice, differently: {said.where} says "
                f"{'epsilon' if said.epsilon is not None else 'rho'}={said.epsilon if said.epsilon is not None else said.rho}, "
                f"the call {'epsilon' if epsilon is not None else 'rho'}={epsilon if epsilon is not None else rho}; give it once"
            )
        if rho is not None:
            if self.settings.noise != "gaussian":
                raise ProgrammingError("rho= is for Gaussian noise: connect(..., noise='gaussian'); use epsilon= here")
            return Cost.zcdp(rho)
        if epsilon is None:
            epsilon = self.settings.default_epsilon
        if epsilon is None:
            return None
        pure = Cost.pure(epsilon)
        # Gaussian mode: epsilon= buys the same zCDP cost as a pure epsilon statement, rho = epsilon^2 / 2
        return pure if self.settings.noise == "laplace" else Cost.zcdp(pure.rho)

    def selection_delta(self) -> float:
        """δ one key selection spends: the configured one, or a share of the budget's δ."""
        configured = self.settings.selection_delta
        return self.budget.delta * DEFAULT_SELECTION_DELTA_SHARE if configured is None else float(configured)

    def plan(self, workload: planner.Workload, privacy: planner.Privacy, contributions: int) -> planner.Plan:
        """``planner.plan``, memoised (a plan depends only on public inputs), with planner errors as dpsql's."""
        key = (workload, privacy, contributions)
        cached = self.plans.get(key)
        if cached is None:
            try:
                cached = planner.plan(workload, privacy, contributions=contributions, progress=progress.bar("planning", unit="family", delay=2.0))
            except MemoryError as error:
                raise NotSupportedError(f"the statement's workload is too large to plan: {error}") from error
            except (ValueError, TypeError, ArithmeticError) as error:
                raise ProgrammingError(f"cannot plan the statement: {error}") from error
            self.plans.put(key, cached)
        return cached

    def memoised(self, kind: str, inputs: object, compute: Callable[[], T]) -> T:
        """``compute()``, kept for later calls with equal ``inputs`` (compared by :func:`_frozen`: every
        field, item and array byte), least recently used evicted. Only for pure functions of public
        inputs — the backend's SQL for an aggregation, a compiled batch — whose cost per statement
        rivals the database's whole answer on a small table. Exceptions are not kept."""
        try:
            key = (kind, _frozen(inputs))
        except TypeError:  # an input that cannot be compared safely: computed every time
            return compute()
        found = self._memo.pop(key, _MISSING)
        if found is _MISSING:
            found = compute()
        self._memo[key] = found
        while len(self._memo) > MEMO_SIZE:
            self._memo.popitem(last=False)
        return found  # type: ignore[return-value]


class PlanCache:
    """Plans by (workload, privacy, contributions), least recently used evicted; safe to share between
    sessions on several threads (``dpsql serve`` gives all connections of one analyst one cache): a plan
    is a pure function of public inputs."""

    def __init__(self, size: int = PLAN_CACHE_SIZE) -> None:
        self.size = size
        self._plans: OrderedDict[Hashable, planner.Plan] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> planner.Plan | None:
        with self._lock:
            found = self._plans.pop(key, None)
            if found is not None:
                self._plans[key] = found
            return found

    def put(self, key: Hashable, plan: planner.Plan) -> None:
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > self.size:
                self._plans.popitem(last=False)


def _frozen(value: object) -> Hashable:
    """A hashable value equal for equal inputs: dataclasses field by field, mappings and sequences item by
    item, numpy arrays by shape, type and bytes; a value's type is part of it (1, 1.0 and True differ)."""
    kind = type(value)
    if kind in _ATOMS:
        return (kind, value)
    if kind is tuple or kind is list:
        return ("sequence", *map(_frozen, value))  # type: ignore[call-overload]
    if kind is Statement:
        return _frozen_statement(value)  # type: ignore[arg-type]
    names = _dataclass_fields(kind)
    if names is not None:
        return (kind.__qualname__, *(_frozen(getattr(value, name)) for name in names))
    if isinstance(value, Mapping):
        return ("mapping", *((_frozen(k), _frozen(v)) for k, v in value.items()))
    if hasattr(value, "tobytes") and hasattr(value, "dtype") and hasattr(value, "shape"):  # a numpy array (numpy not imported here)
        return ("array", value.shape, value.dtype.str, value.tobytes())
    hash(value)  # anything else must be hashable as it is
    return (kind.__qualname__, value)


_FROZEN_STATEMENTS: dict[int, tuple[weakref.ref[Statement], Hashable]] = {}


def _frozen_statement(statement: Statement) -> Hashable:
    """A bound statement's :func:`_frozen` form, kept while the statement lives: a statement is immutable,
    and a repeated batch is bound to the same statement objects (kept per text), so its memo keys are not
    walked again (4,950 statements: about 475,000 values per key, twice per call)."""
    identity = id(statement)
    found = _FROZEN_STATEMENTS.get(identity)
    if found is not None and found[0]() is statement:
        return found[1]
    names = _dataclass_fields(Statement)
    assert names is not None
    frozen = (Statement.__qualname__, *(_frozen(getattr(statement, name)) for name in names))
    _FROZEN_STATEMENTS[identity] = (weakref.ref(statement, lambda _: _FROZEN_STATEMENTS.pop(identity, None)), frozen)
    return frozen


@functools.cache
def _dataclass_fields(kind: type) -> tuple[str, ...] | None:
    """The field names of a dataclass type, None for any other type (looked up once per type: a memo key
    of a compiled statement visits a few hundred values)."""
    return tuple(f.name for f in dataclasses.fields(kind)) if dataclasses.is_dataclass(kind) else None
