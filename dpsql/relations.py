"""Declared keys between registered tables, and the privacy units they share.

A schema may declare foreign keys (``visits.person_id → persons.id``, ``visits.clinic_id → clinics.id``,
``dpsql.schema``). :func:`check_keys` checks them when a table is registered, against every table registered
so far and in both directions (a key to a table registered later is checked then), from the tables' names,
columns and types only — no row is read:

* the referenced column exists, and its type compares with the referencing column's (both numbers, both text,
  both dates, …);
* a private table's unit column that references a private table references that table's unit: the two tables
  then protect the same units;
* a public table references public tables only (its rows are not protected: it cannot describe private ones).

:func:`unit_root` is the unit a private table protects, as declared: follow the unit column's foreign key to the
referenced private table's unit, as long as there is one. Two private tables protect the same units exactly
when their roots agree; joins between private tables must equate such units (``dpsql.joins``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dpsql.errors import ProgrammingError
from dpsql.schema import ForeignKey
from dpsql.sql.parse import names_table

if TYPE_CHECKING:
    from dpsql.table import Table


def find_table(name: str, tables: Sequence[Table]) -> Table | None:
    """The table ``name`` (as a schema or a statement writes it) names among ``tables``: None when none or several."""
    path = tuple(name.lower().split("."))
    matches = [t for t in tables if names_table(path, tuple(t.name.lower().split(".")))]
    return matches[0] if len(matches) == 1 else None


def check_keys(table: Table, registered: Sequence[Table]) -> None:
    """Check the declared keys between ``table`` (being registered) and the ``registered`` tables (module doc)."""
    everything = [*registered, table]
    for source in everything:
        for key in source.schema.foreign_keys:
            target = find_table(key.table, everything)
            if target is None or (source is not table and target is not table):
                continue  # not registered yet (checked when it is), or checked when the later of the two was registered
            _check_key(source, key, target)
    unit_root(table, everything)  # a cycle of units referencing each other is refused


def _check_key(source: Table, key: ForeignKey, target: Table) -> None:
    where = f"foreign key {source.name}.{key}"
    if key.referenced not in target.column_types:
        raise ProgrammingError(f"{where}: {target.name!r} has no column {key.referenced!r}; its columns are {list(target.column_types)}")
    mine, theirs = source.column_types[key.column], target.column_types[key.referenced]
    if not (mine.kind == theirs.kind or (mine.is_numeric and theirs.is_numeric)):
        raise ProgrammingError(
            f"{where}: {key.column} has type {mine.name} and {target.name}.{key.referenced} {theirs.name}; a key compares values of "
            "one kind (numbers, text, dates, …): reference a column of the same kind"
        )
    if source.schema.public and not target.schema.public:
        raise ProgrammingError(
            f"{where}: a public table may reference public tables only ({target.name!r} is private); drop the key from {source.name!r}'s schema"
        )
    if key.column == source.schema.privacy_unit and not target.schema.public and target.schema.privacy_unit != key.referenced:
        unit = target.schema.privacy_unit
        fix = (f"reference {target.name}.{unit}, the column that holds its units" if unit is not None else
               "declare that table's privacy unit column, or reference a table that has one")
        has = f"{target.name!r} protects units in {unit!r}" if unit is not None else f"{target.name!r} has no privacy unit column (one row is one unit)"
        raise ProgrammingError(f"{where}: the privacy unit of {source.name!r} references a private table, so it must reference its unit, but {has}: {fix}")


def unit_root(table: Table, tables: Sequence[Table]) -> tuple[str, str] | None:
    """``(table, column)`` of the unit ``table`` protects (module doc); None for a public or row-level table."""
    seen: list[str] = []
    current = table
    while True:
        unit = current.schema.privacy_unit
        if current.schema.public or unit is None:
            return None if current is table else (current.name.lower(), "")
        if current.name.lower() in seen:
            raise ProgrammingError(
                f"the privacy units of {seen} reference each other in a cycle; one table's unit must be its own (a unit column "
                "without a foreign key)"
            )
        seen.append(current.name.lower())
        key = current.schema.foreign_key(unit)
        target = None if key is None else find_table(key.table, tables)
        if key is None or target is None or target.schema.public:
            return (current.name.lower(), unit)
        current = target
