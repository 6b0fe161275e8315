"""Columns with no public domain: their keys are selected privately, then they are counted like any other.

``SELECT browser, COUNT(*) FROM logs GROUP BY browser`` with ``browser: unknown`` in the schema — or a
CUBE, a UNION ALL or a batch grouping by it anywhere — runs in one statement and one charge
(``dpsql.pipeline``):

1. **Bounding** (in SQL, :class:`dpsql.sql.bounded.BoundedAggregation` with a :class:`KeyedColumn`): after
   the unit bound (``max_rows_per_unit = m`` rows per unit), each unit keeps at most
   ``max_groups_per_unit = k`` of its keys (a random choice) and ``max_rows_per_group = r`` rows per kept
   key; its other rows go to the column's *remainder* cell. So a unit touches at most ``k`` keys, adds at
   most ``r`` rows to one key and at most ``m`` rows in all (the counts' L1 sensitivity).
2. **One pass**: the database returns, over those rows, the distinct units of every key and the counts of
   every (key, other cells) combination, the remainder included.
3. **Selection** (:func:`select_keys`): the key set is chosen by the primitive the planner's split picked
   (``planner.selection_split``) from the distinct-unit counts, clipped where the keep probability
   reaches 1. Only keys present in the bounded rows can be kept.
4. **Counting**: the released keys — sorted, NULL last — plus the remainder become the column's domain
   (:func:`keys_domain`); rows of keys that were not released are counted in the remainder, so totals
   over the column are totals over the table. The statement is compiled and planned over that domain and
   measured with the counting share of the budget. The remainder is never shown as a group.

The key set is cached on the session (:class:`ReleasedKeys`, per registered table and column): later
statements use it as the column's domain, in GROUP BY, WHERE and COUNT, and pay for counting only.
Selection needs δ > 0 (pure ε-DP admits no selection): each one spends the session's selection δ.
The number of keys considered is private and never shown; the number released is the number of rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpsql.schema import ColumnDomain, Schema
from dpsql.sql.bounded import KeyHistogram
from planner import PartitionSelection


@dataclass(frozen=True)
class KeyBounds:
    """What one unit may contribute to a GROUP BY on an unknown column."""

    max_groups_per_unit: int  # k
    max_rows_per_group: int  # r
    max_rows_per_unit: int  # m

    @classmethod
    def of(cls, schema: Schema) -> KeyBounds:
        rows_per_group = schema.max_rows_per_group or schema.max_rows_per_unit
        return cls(schema.max_groups_per_unit, min(rows_per_group, schema.max_rows_per_unit), schema.max_rows_per_unit)

    def describe(self) -> str:
        return (
            f"at most {self.max_groups_per_unit} key(s) per unit (random), {self.max_rows_per_group} row(s) per unit "
            f"and key, {self.max_rows_per_unit} row(s) per unit in all; a unit's other rows count in the remainder"
        )


class ReleasedKeys:
    """Key sets released on one session, per registered table and column. Re-using one is post-processing:
    it costs nothing. An entry belongs to the registered table object it was released from, so
    re-registering the table (new data) makes it unused."""

    def __init__(self) -> None:
        self._entries: dict[tuple[int, str], tuple[object, ...]] = {}
        self._tables: dict[int, object] = {}  # keeps each table object alive while its id is a key

    def get(self, table: object, column: str) -> tuple[object, ...] | None:
        return self._entries.get((id(table), column))

    def put(self, table: object, column: str, keys: tuple[object, ...]) -> None:
        self._tables[id(table)] = table
        self._entries[(id(table), column)] = keys


def _sort_key(value: object) -> tuple[str, object]:
    return (type(value).__name__, value)


def keys_domain(column: str, keys: tuple[object, ...]) -> ColumnDomain:
    """The released keys as the column's domain: sorted, NULL as the nullable cell, then the remainder."""
    values = tuple(sorted((k for k in keys if k is not None), key=_sort_key))
    return ColumnDomain(column, "keys", values, nullable=None in keys)


class _PlaceholderKey:
    """Stands for the keys a statement will release, while it is prepared (never a released key)."""

    def __repr__(self) -> str:
        return "<a key to be selected>"


PLACEHOLDER_KEY = _PlaceholderKey()


def placeholder_domain(column: str) -> ColumnDomain:
    """The domain a column has before its keys are selected: one stand-in key and the remainder, so that
    every statement shape compiles as it will over the released keys (COUNT(column) counts the keys'
    rows, not nothing)."""
    return ColumnDomain(column, "keys", (PLACEHOLDER_KEY,), nullable=False)


@dataclass(frozen=True)
class Selected:
    """The outcome of selection: the released keys and, for thresholding that reuses its noisy count,
    the noisy unit count of each released key."""

    keys: tuple[object, ...]
    noisy_units: dict[object, int] | None


def select_keys(histogram: KeyHistogram, primitive: PartitionSelection, rng: object) -> Selected:
    """Apply the selection primitive to every key's distinct units (clipped where π reaches 1)."""
    units = histogram.units.astype(np.int64)
    always = primitive.always_kept()
    if math.isfinite(always):
        units = np.minimum(units, int(math.ceil(always)))
    mask, noisy = primitive.keep(units, rng=rng)
    released = tuple(k for k, kept in zip(histogram.keys, mask) if kept)
    if noisy is None:
        return Selected(released, None)
    return Selected(released, {k: int(v) for k, v, kept in zip(histogram.keys, noisy, mask) if kept})


def table_over_keys(histogram: KeyHistogram, domain: ColumnDomain) -> np.ndarray:
    """The count table over (the column's cells, the other attributes): each released key's kept rows in
    its cell; the remainder cell holds the rows no unit kept under its key and every unreleased key's."""
    cell_of = {label: cell for cell, label in enumerate(domain.labels()[: domain.size - 1])}
    table = np.zeros((domain.size, *histogram.remainder.shape), dtype=np.int64)
    table[domain.size - 1] = histogram.remainder
    for position, key in enumerate(histogram.keys):
        table[cell_of.get(key, domain.size - 1)] += histogram.counts[position]
    return table
