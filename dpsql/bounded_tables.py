"""Each registered table's bounded rows, kept once in the backend, so a statement pays only its aggregation.

With a privacy unit, every statement counts *the bounded rows* of its table (:mod:`dpsql.sql.bounded_rows`):
the rows that pass the declared domain tests, at most ``max_rows_per_unit`` per unit, chosen by a salted
hash whose salt is drawn once per registration. They do not depend on the statement, so they are computed
once — by the first statement that reads the table — and kept as a temporary table of the backend
(DuckDB, PostgreSQL); every later statement aggregates that table directly. A new registration of the name is a new table (a new salt): its predecessor's
relation is dropped, and the new one is computed by its own first read. Closing the connection drops them
all.

**The one charge rule.** Computing the bounded rows reads private rows, so it happens only inside a
charged statement's read (``pipeline._read``), just before that statement's aggregation, under the same
rule: the ledger was charged first, an engine failure is reported by class only, and a failed creation
leaves nothing behind (the next charged statement tries again). What a caller can see of it — the first
statement takes longer — depends on the table's size, as any read's time does, and on nothing a
statement asks. Whether a backend can keep relations at all is found out at ``register()`` with a probe
that reads no table (``SELECT 1``); a backend that cannot (no ``create_temporary`` — Spark, where a
cached view proved slower than recomputing, see ``dpsql.backends.spark`` — or the probe fails: no
temporary-table privilege) gets the same bounded rows computed by a subquery of every statement instead:
the same rows and answers, at the cost of bounding in every statement.

The kept relation is visible to this connection's own backend session (as the registered data already
is to anyone holding it: see the README's privacy model); its name is random. It is a snapshot: rows
added to the source after the first read are not counted until the table is registered again.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.errors import OperationalError
from dpsql.joined_tables import JoinedTable
from dpsql.sql.bounded_rows import bounded_rows, in_domain, relation_source

if TYPE_CHECKING:
    from dpsql.backends.base import Backend
    from dpsql.table import Table

PROBE_QUERY = "SELECT 1 AS one"


def _bounded(table: Table) -> exp.Query:
    """A table's bounded rows (``dpsql.sql.bounded_rows``): the same query whether kept or inlined."""
    return bounded_rows(
        table.relation, table.declared_columns(), table.column_types, table.schema.privacy_unit,  # type: ignore[arg-type]
        table.schema.max_rows_per_unit, table.salt, tuple(table.column_types), with_levels=table.schema.choose_bound,
    )


def _domain_tests(table: Table) -> exp.Expression:
    """A table without a privacy unit: its rows within every declared domain (what its statements count)."""
    tests = [in_domain(exp.column(n, quoted=True), d, table.column_types[n]) for n, d in table.declared_columns().items()]
    return exp.and_(*tests) if tests else exp.true()


class BoundedTables:
    """The kept bounded rows of a connection's registered tables (module doc)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._can_keep: bool | None = None  # found out by the first registration with a privacy unit
        self._names: dict[Table, str] = {}  # relation name of each table whose rows are (to be) kept
        self._created: set[str] = set()

    def register(self, table: Table, previous: Table | None) -> None:
        """A table was registered (replacing ``previous``): drop what was kept for the old one, and name
        the relation the new one's bounded rows will be kept in, if the backend can keep them."""
        if previous is not None:
            self.forget(previous)
        if table.schema.privacy_unit is not None and self._keeps_relations():
            self._names[table] = f"__dpsql_bounded_{secrets.token_hex(8)}"

    def relation(self, table: Table) -> str | None:
        """Where ``table``'s bounded rows are kept (created by :meth:`ensure`), or None: inline them."""
        return self._names.get(table)

    def rows_of(self, table: Table) -> tuple[str | exp.Query, bool]:
        """What a statement over ``table`` reads, and whether those rows are bounded already: the kept bounded rows;
        for a joined relation (``dpsql.joined_tables``) its rows over its private part's bounded rows (kept, or
        computed inline); else the table itself (its statements bound it inline)."""
        if isinstance(table, JoinedTable):
            private = table.private
            kept = self._names.get(private)
            if kept is not None:
                return table.rows(kept), True
            if private.schema.privacy_unit is None:
                return table.rows(exp.select(exp.Star()).from_(relation_source(private.relation, "rows")).where(_domain_tests(private))), True
            return table.rows(_bounded(private)), True
        kept = self._names.get(table)
        if kept is None and table.schema.choose_bound:  # its rows carry their levels: bounded here, not by the statement
            return _bounded(table), True
        return (table.relation, False) if kept is None else (kept, True)

    def ensure(self, table: Table) -> None:
        """Compute and keep ``table``'s bounded rows (a joined relation's: its private part's) unless they are kept
        already. Reads private rows: call it only inside a charged statement's read."""
        if isinstance(table, JoinedTable):
            table = table.private
        name = self._names.get(table)
        if name is None or name in self._created:
            return
        self._backend.create_temporary(name, _bounded(table).sql(dialect=self._backend.dialect))  # type: ignore[attr-defined]
        self._created.add(name)

    def forget(self, table: Table) -> None:
        name = self._names.pop(table, None)
        if name is not None and name in self._created:
            self._created.discard(name)
            self._backend.drop_temporary(name)  # type: ignore[attr-defined]

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
            self._can_keep = callable(getattr(backend, "create_temporary", None)) and callable(getattr(backend, "drop_temporary", None))
            if self._can_keep:
                probe = f"__dpsql_probe_{secrets.token_hex(8)}"
                try:
                    backend.create_temporary(probe, PROBE_QUERY)  # type: ignore[attr-defined]
                    backend.drop_temporary(probe)  # type: ignore[attr-defined]
                except OperationalError:
                    self._can_keep = False
        return self._can_keep
