"""Each registered table's bounded rows, kept once in the backend, so a statement pays only its aggregation.

With a privacy unit, every statement counts *the bounded rows* of its table (:mod:`dpsql.sql.bounded_rows`):
the rows that pass the declared domain tests, at most ``max_rows_per_unit`` per unit, chosen by a salted
hash whose salt is drawn once per registration. They do not depend on the statement. The *first* charged
statement on a registration reads them inline — the bounding fused into its one aggregation, the engine's
own window query, at the cost and memory of the engine bounding the rows itself — and keeps nothing. The
*second* one computes them into a temporary table of the backend (DuckDB, PostgreSQL) before its
aggregation, in the form whose memory is about that of the window alone (``thresholds``); it and every
later statement aggregate that table directly. So a one-statement session never pays for a table it would
not read again, and a session of many pays once. A new registration of the name is a new table (a new
salt): its predecessor's relation is dropped, and the new one starts over. Closing the connection drops
them all.

**The one charge rule.** Computing the bounded rows reads private rows, so it happens only inside a
charged statement's read (``pipeline._read``), just before that statement's aggregation, under the same
rule: the ledger was charged first, an engine failure is reported by class only, and a failed creation
leaves nothing behind (the next charged statement tries again). What a caller can see of it — which
statement takes longer — depends on the table's size and on how many statements were charged, as any
read's time does, and on nothing a statement asks. Whether a backend can keep relations at all is found
out at ``register()`` with a probe that reads no table (``SELECT 1``); a backend that cannot (no
``create_temporary`` — Spark, where a cached view proved slower than recomputing, see
``dpsql.backends.spark`` — or the probe fails: no temporary-table privilege) reads the bounded rows inline in
every statement: the same rows and answers, at the cost of bounding in every statement.

The kept relation is visible to this connection's own backend session (as the registered data already
is to anyone holding it: see the README's privacy model); its name is random. It is a snapshot taken by
the second charged read: rows added to the source after that are not counted until the table is
registered again (the first statement, read inline, saw the source as it was then).

**Shared by a server's sessions.** The registrations of one database can be shared by many sessions
(:class:`dpsql.session.Registrations`; ``dpsql serve`` shares its DuckDB database's): then the tables are
registered once, every session reads the same registration (the same salt), and the kept relation is one
table of the database that every connection to it sees (``create_shared``), not one temporary table per
session. The first charged read of *any* session computes it, under a lock that later reads of the table
wait on, so it is computed once per table and server; a failed computation leaves nothing and the next
charged read, of whichever session, tries again. Only its owner (the server) drops it.
"""

from __future__ import annotations

import secrets
import threading
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.errors import OperationalError
from dpsql.joined_tables import JoinedTable
from dpsql.sql.bounded_rows import BoundingForm, bounded_rows, in_domain, relation_source

if TYPE_CHECKING:
    from dpsql.backends.base import Backend
    from dpsql.table import Table

PROBE_QUERY = "SELECT 1 AS one"
INLINE_READS = 1  # charged reads of a registration that compute its bounded rows inline before one keeps them


def _bounded(table: Table, form: BoundingForm = "window") -> exp.Query:
    """A table's bounded rows (``dpsql.sql.bounded_rows``): the same rows whether kept or inlined (with their
    levels, in the window form, when its statements choose their bound)."""
    return bounded_rows(
        table.relation, table.declared_columns(), table.column_types, table.schema.privacy_unit,  # type: ignore[arg-type]
        table.schema.max_rows_per_unit, table.salt, tuple(table.column_types),
        form="window" if table.schema.choose_bound else form, with_levels=table.schema.choose_bound,
    )


def _domain_tests(table: Table) -> exp.Expression:
    """A table without a privacy unit: its rows within every declared domain (what its statements count)."""
    tests = [in_domain(exp.column(n, quoted=True), d, table.column_types[n]) for n, d in table.declared_columns().items()]
    return exp.and_(*tests) if tests else exp.true()


class BoundedTables:
    """The kept bounded rows of the registered tables of one connection, or — ``shared`` — of one database
    whose sessions share its registrations (module doc). Safe to use from several threads."""

    def __init__(self, backend: Backend, shared: bool = False) -> None:
        self._backend = backend
        self._shared = shared
        self._create, self._drop = ("create_shared", "drop_shared") if shared else ("create_temporary", "drop_temporary")
        self._can_keep: bool | None = None  # found out by the first registration with a privacy unit
        self._names: dict[Table, str] = {}  # relation name of each table whose rows are (to be) kept
        self._created: set[str] = set()
        self._lock = threading.Lock()  # guards the maps below; never held while the engine works
        self._building: dict[str, threading.Lock] = {}  # held while one relation is computed: its first reads wait for it, others do not
        self._inline_reads: dict[Table, int] = {}  # charged reads that read a table's bounded rows inline

    def register(self, table: Table, previous: Table | None) -> None:
        """A table was registered (replacing ``previous``): drop what was kept for the old one, and name
        the relation the new one's bounded rows will be kept in, if the backend can keep them."""
        if previous is not None:
            self.forget(previous)
        if table.schema.privacy_unit is not None and self._keeps_relations():
            with self._lock:
                self._names[table] = f"__dpsql_bounded_{secrets.token_hex(8)}"

    def relation(self, table: Table) -> str | None:
        """Where this charged read finds ``table``'s bounded rows: the kept relation when it exists or this
        read keeps it (created by :meth:`ensure`), else None: the read computes them inline. Call it once per
        charged read (it counts the inline ones)."""
        with self._lock:
            name = self._names.get(table)
            if name is None:
                return None
            if name not in self._created and self._inline_reads.get(table, 0) < INLINE_READS:
                self._inline_reads[table] = self._inline_reads.get(table, 0) + 1
                return None
            return name

    def rows_of(self, table: Table) -> tuple[str | exp.Query, bool, bool]:
        """What this charged read over ``table`` reads; whether those rows are bounded already; and whether they
        are the kept relation, which the read must :meth:`ensure` first. The kept bounded rows
        (:meth:`relation`); for a joined relation (``dpsql.joined_tables``) its rows over its private part's
        bounded rows (kept, or computed inline); else the table itself (the statement bounds it inline). Call it
        once per charged read, as :meth:`relation`."""
        if isinstance(table, JoinedTable):
            private = table.private
            if private.schema.privacy_unit is None:
                return table.rows(exp.select(exp.Star()).from_(relation_source(private.relation, "rows")).where(_domain_tests(private))), True, False
            kept = self.relation(private)
            return table.rows(_bounded(private) if kept is None else kept), True, kept is not None
        kept = self.relation(table)
        if kept is None:  # inline: rows whose levels a statement chooses from are bounded here, others by the statement
            return (_bounded(table), True, False) if table.schema.choose_bound else (table.relation, False, False)
        return kept, True, True

    def ensure(self, table: Table) -> None:
        """Compute and keep ``table``'s bounded rows (a joined relation's: its private part's) unless they are kept
        already; for a read that :meth:`rows_of` sent to the kept relation. Reads private rows: call it only
        inside a charged statement's read."""
        if isinstance(table, JoinedTable):
            table = table.private
        with self._lock:
            name = self._names.get(table)
            if name is None or name in self._created:
                return
            building = self._building.setdefault(name, threading.Lock())
        with building:  # a read of another table goes on meanwhile
            with self._lock:
                if name in self._created:
                    return
            getattr(self._backend, self._create)(name, _bounded(table, "thresholds").sql(dialect=self._backend.dialect))
            with self._lock:
                self._building.pop(name, None)
                forgotten = self._names.get(table) != name  # re-registered while it was computed
                if not forgotten:
                    self._created.add(name)
            if forgotten:
                getattr(self._backend, self._drop)(name)

    def forget(self, table: Table) -> None:
        with self._lock:
            self._inline_reads.pop(table, None)
            name = self._names.pop(table, None)
            if name is not None and name in self._created:
                self._created.discard(name)
                getattr(self._backend, self._drop)(name)

    def close(self) -> None:
        """Drop every kept relation (best effort: the backend may already be gone)."""
        for table in list(self._names):
            try:
                self.forget(table)
            except OperationalError:
                pass

    def _keeps_relations(self) -> bool:
        """Whether the backend can keep a relation: it has the methods and a probe that reads no table works."""
        if self._can_keep is None:
            backend = self._backend
            self._can_keep = callable(getattr(backend, self._create, None)) and callable(getattr(backend, self._drop, None))
            if self._can_keep:
                probe = f"__dpsql_probe_{secrets.token_hex(8)}"
                try:
                    getattr(backend, self._create)(probe, PROBE_QUERY)
                    getattr(backend, self._drop)(probe)
                except OperationalError:
                    self._can_keep = False
        return self._can_keep
