"""A registered table as statements read it: its relation in the backend, its checked schema, its column types.

A joined relation (``dpsql.joined_tables``) is a table too: its columns are named ``<source>.<column>`` after
the names or aliases its FROM clause gives its tables, and a statement may name them unqualified when one
source has the column (:func:`matching_columns`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from sqlglot import exp

from dpsql.schema import ColumnDomain, Schema
from dpsql.sql.literals import ColumnType

HIDDEN_SOURCE = "__dpsql_"  # sources of dpsql's own in a joined relation (IN (SELECT …)): never matched unqualified


@dataclass(frozen=True, eq=False)
class Table:
    """A registered table: its name in the backend (or, for a joined relation, the query of its rows), its checked
    schema and its column types. A new registration is a new object: what was kept or released for the old one no
    longer applies."""

    name: str
    relation: str | exp.Query
    schema: Schema
    column_types: dict[str, ColumnType]
    salt: int  # secret (OS entropy): orders every unit's rows for contribution bounding, the same way for every statement

    def declared_columns(self) -> dict[str, ColumnDomain]:
        """The columns with a declared domain: their domain tests decide which rows every statement counts."""
        return {c.name: c for c in self.schema.columns if c.is_known and c.name in self.column_types}

    @functools.cached_property
    def has_undeclared_columns(self) -> bool:
        """Whether some column has no declared domain (its keys, if grouped by, are selected privately)."""
        return any(not self.schema.column(name).is_known for name in self.column_types)

    @property
    def fan_out(self) -> int:
        """The rows of the relation one kept private row can become (joined public tables' rows per key; 1 for a table)."""
        return 1

    def bounding(self) -> str:
        """How the rows one unit contributes are bounded (EXPLAIN)."""
        schema = self.schema
        return f"at most {schema.max_rows_per_unit} random row(s) per {schema.privacy_unit!r}" if schema.privacy_unit else "one row = one unit"

    def resolve(self, name: str) -> str | None:
        """The table's spelling of a column name (:func:`matching_columns`), None unless exactly one matches."""
        matches = matching_columns(name, self.column_types)
        return matches[0] if len(matches) == 1 else None


def matching_columns(name: str, columns: Iterable[str]) -> list[str]:
    """The columns ``name`` may mean: itself, else its case-insensitive matches, else — for a name without a
    qualifier, in a joined relation — the columns ``<source>.<name>`` (case-insensitive; dpsql's own sources
    excepted)."""
    names = list(columns)
    if name in names:
        return [name]
    found = [c for c in names if c.lower() == name.lower()]
    if found or "." in name:
        return found
    return [c for c in names if "." in c and not c.startswith(HIDDEN_SOURCE) and c.split(".", 1)[1].lower() == name.lower()]
