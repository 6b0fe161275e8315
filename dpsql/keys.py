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
   (:meth:`KeySet.domain`); rows of keys that were not released are counted in the remainder, so totals
   over the column are totals over the table. The statement is compiled and planned over that domain and
   measured with the counting share of the budget. The remainder is never shown as a group.

**Keys are text.** The engine returns each key as its canonical text (``CAST(key AS TEXT)``, one per
distinct SQL value, see :mod:`dpsql.sql.bounded`), and the text is the key's identity everywhere in
Python: selection, the cache, the cells of the domain. What a released row *shows* is the text read back
in the column's type (:func:`key_value`): an integer of any width (HUGEINT, UBIGINT exactly), a
``Decimal`` (DECIMAL/NUMERIC exactly), a float (NaN and ±infinity included), a bool, a date or a
timestamp — or the text itself when Python has no such value (``'infinity'`` and years beyond 9999 of a
DATE). Reading it back is total: it never raises, whatever the engine printed. Two keys the engine kept
apart are never merged, even where they show alike.

**Several columns** without a declared domain in one statement read their keys as tuples (one canonical
text per column): bounding keeps at most ``k`` tuples per unit. :func:`projections` gives each column its
keys from released tuples, :func:`table_over_keys` places tuples on one axis per column, and
:func:`per_selected_key` regroups tuples by the selected column's part when the others' keys are public.

The key set is cached on the session (:class:`ReleasedKeys`, per registered table and column): later
statements use it as the column's domain, in GROUP BY, WHERE and COUNT, and pay for counting only.
Selection needs δ > 0 (pure ε-DP admits no selection): each one spends the session's selection δ.
The number of keys considered is private and never shown; the number released is the number of rows.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from sqlglot import exp

from dpsql.schema import ColumnDomain, Schema
from dpsql.sql.bounded import Key, KeyHistogram, sorted_keys
from dpsql.sql.literals import ColumnType
from planner import Domain, PartitionSelection

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9:.]+([+-][0-9:]+|Z)?")
_BOOLEANS = {"true": True, "false": False}
_FLOATING = (exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE, exp.DataType.Type.UDOUBLE)
_TIMESTAMPS = tuple(t for t in exp.DataType.TEMPORAL_TYPES if t.name.startswith(("TIMESTAMP", "DATETIME")))


def key_value(text: str | None, column_type: ColumnType) -> object:
    """The value a key's canonical text shows as, in the column's type (module doc); the text itself when
    Python has no such value. Never raises."""
    data_type = column_type.data_type
    if text is None or data_type is None or column_type.is_text:
        return text
    try:
        if column_type.is_boolean:
            return _BOOLEANS.get(text.lower(), text)
        if column_type.is_integer:
            return int(text) if _INTEGER.fullmatch(text) else text
        if data_type.is_type(*_FLOATING):
            return float(text) + 0.0  # −0.0 shows as 0.0, its equal in SQL (engines print either)
        if column_type.is_numeric:
            exact = decimal.Decimal(text)
            return exact if exact.is_finite() else float(text)
        if column_type.is_date:
            return datetime.date.fromisoformat(text) if _DATE.fullmatch(text) else text
        if data_type.is_type(*_TIMESTAMPS):
            return datetime.datetime.fromisoformat(text) if _TIMESTAMP.fullmatch(text) else text
    except (ValueError, ArithmeticError, OverflowError):
        return text
    return text


def _shown_order(value: object, fallback: bool) -> tuple[object, ...]:
    """A total order over the values one column's keys show as: the column's own values in their order
    (NaN after the numbers), then texts Python could not read back (``fallback``)."""
    if fallback:
        return (1, 0, value)
    if isinstance(value, (bool, int, float, decimal.Decimal)):
        nan = isinstance(value, float) and math.isnan(value)
        return (0, int(nan), 0 if nan else value)
    if isinstance(value, datetime.datetime):
        aware = value.tzinfo is not None and value.utcoffset() is not None
        return (0, 1 + int(aware), value.timestamp() if aware else value.isoformat())
    if isinstance(value, datetime.date):
        return (0, 0, value.isoformat())
    return (0, 0, str(value))


@dataclass(frozen=True)
class KeySet:
    """The keys of a column released by a selection: their canonical texts (the identity; None for the
    NULL key) in domain order — values in order, NULL last — and the value each shows as."""

    texts: tuple[str | None, ...]
    values: tuple[object, ...]

    @classmethod
    def of(cls, texts: Iterable[str | None], column_type: ColumnType) -> KeySet:
        shown = {text: key_value(text, column_type) for text in texts}

        def order(text: str | None) -> tuple[object, ...]:
            value = shown[text]
            fallback = isinstance(value, str) and not column_type.is_text and column_type.data_type is not None
            return (text is None, _shown_order(value, fallback), text or "")

        ordered = tuple(sorted(shown, key=order))
        return cls(ordered, tuple(shown[t] for t in ordered))

    def __len__(self) -> int:
        return len(self.texts)

    def domain(self, column: str) -> ColumnDomain:
        """The released keys as the column's domain: the values, then the NULL cell, then the remainder."""
        return ColumnDomain(column, "keys", tuple(v for t, v in zip(self.texts, self.values) if t is not None), nullable=None in self.texts)

    def cells(self) -> dict[str | None, int]:
        """The cell of each released key (by text) in :meth:`domain`."""
        return {text: cell for cell, text in enumerate(self.texts)}


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
        self._entries: dict[tuple[int, str], KeySet] = {}
        self._tables: dict[int, object] = {}  # keeps each table object alive while its id is a key

    def get(self, table: object, column: str) -> KeySet | None:
        return self._entries.get((id(table), column))

    def put(self, table: object, column: str, keys: KeySet) -> None:
        self._tables[id(table)] = table
        self._entries[(id(table), column)] = keys


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


def select_keys(histogram: KeyHistogram, primitive: PartitionSelection, rng: object) -> tuple[Key, ...]:
    """The keys (texts) the selection primitive keeps from every key's distinct units."""
    kept = primitive.select(histogram.units, rng=rng)
    return tuple(k for k, keep in zip(histogram.keys, kept) if keep)


def projections(tuples: Sequence[tuple[str | None, ...]], column_types: Sequence[ColumnType]) -> tuple[KeySet, ...]:
    """Each column's key set from released key tuples of jointly selected columns: the texts it shows in some
    released tuple (a released tuple's parts are released facts; the column's cells are their union)."""
    return tuple(KeySet.of(dict.fromkeys(t[i] for t in tuples), column_type) for i, column_type in enumerate(column_types))


def table_over_keys(histogram: KeyHistogram, key_sets: Sequence[KeySet]) -> np.ndarray:
    """The count table over (each key column's cells, the other attributes): each released key's kept rows in
    its cell; a column's remainder cell (the last) holds the rows of keys it did not release, and every
    column's remainder the rows no unit kept under their key. One key set: keys are texts; several (jointly
    selected columns): keys are tuples of texts, each part placed by its column's key set."""
    cells_of = [k.cells() for k in key_sets]
    remainders = tuple(len(k) for k in key_sets)  # the cell after each column's released keys
    table = np.zeros((*(r + 1 for r in remainders), *histogram.remainder.shape), dtype=np.int64)
    table[remainders] += histogram.remainder
    parts = [key if isinstance(key, tuple) else (key,) for key in histogram.keys]
    at = tuple(np.fromiter((c.get(p[i], r) for p in parts), dtype=np.int64, count=len(parts)) for i, (c, r) in enumerate(zip(cells_of, remainders)))
    np.add.at(table, at, histogram.counts)  # each key's counts in its cell (unreleased keys pile up in a remainder)
    return table


def over_domain(table: np.ndarray, columns: Sequence[str], domain: Domain) -> np.ndarray:
    """A :func:`table_over_keys` table with each key column's axis at its place among ``domain``'s attributes
    (the other attributes follow the domain's order already)."""
    return np.moveaxis(table, tuple(range(len(columns))), tuple(domain.attributes.index(c) for c in columns))


def per_selected_key(histogram: KeyHistogram, selected: int, public: Sequence[KeySet], axes: Sequence[int]) -> KeyHistogram:
    """A histogram of key tuples — the first ``selected`` parts of columns whose keys are being selected, the
    rest of columns with released key sets ``public`` — as a histogram per selected key (a text, or a tuple
    of them) whose cells gain each public column's cells (a released key's, else its remainder), placed at
    ``axes`` among the other attributes. Rows no unit kept go to the public columns' remainders. Units are
    not carried (the thresholded design reads counts only)."""
    def part(key: Key) -> Key:
        return key[0] if selected == 1 else key[:selected]  # type: ignore[index]

    found = sorted_keys(part(k) for k in histogram.keys)
    index = {key: position for position, key in enumerate(found)}
    cells_of = [k.cells() for k in public]
    remainders = tuple(len(k) for k in public)
    counts = np.zeros((len(found), *(r + 1 for r in remainders), *histogram.remainder.shape), dtype=np.int64)
    remainder = np.zeros(counts.shape[1:], dtype=np.int64)
    remainder[remainders] = histogram.remainder
    for position, key in enumerate(histogram.keys):
        cells = tuple(c.get(p, r) for c, p, r in zip(cells_of, key[selected:], remainders))  # type: ignore[index]
        counts[(index[part(key)], *cells)] += histogram.counts[position]
    moved = tuple(range(len(public)))
    return KeyHistogram(
        found, np.zeros(len(found), dtype=np.int64), np.moveaxis(counts, tuple(m + 1 for m in moved), tuple(a + 1 for a in axes)),
        np.moveaxis(remainder, moved, tuple(axes)),
    )


def distinct_units(histogram: KeyHistogram) -> KeyHistogram:
    """``COUNT(DISTINCT unit) … GROUP BY`` one column without declared domain: each key's distinct units (the read
    counts them per key) as its one cell; a unit adds 1 to each of the at most ``k`` keys it keeps, and nothing
    to the remainder (not a group of its own: never shown)."""
    return KeyHistogram(histogram.keys, histogram.units, histogram.units.copy(), np.zeros((), dtype=np.int64))
