"""Table metadata: the privacy unit, the contribution bound, each column's public domain, declared keys.

A schema is loaded from YAML, JSON or a dict of the same shape::

    privacy_unit: person_id        # or null: one row = one unit
    foreign_keys:                  # the keys joins may use (column: table.column); see "Joins" below
      person_id: persons.id
      clinic_id: clinics.id
    max_rows_per_unit: 3           # rows kept per unit (chosen at random); must be 1 when privacy_unit is null;
                                   # or auto ({auto: 256}): chosen per statement (R2T), at most 1024 (256)
    max_groups_per_unit: 2         # groups one unit counts in (random): COUNT(DISTINCT unit), keys of an unknown GROUP BY column; default 1
    max_rows_per_group: 1          # ... and rows kept per unit and key (default max_rows_per_unit)
    columns:
      sex:     {categories: [F, M]}
      race:    {categories: [0, 1, 2, 3, 4]}
      age:     {range: [17, 90]}                 # integers lo..hi inclusive, ordered
      day:     {range: [2024-01-01, 2024-12-31]} # a DATE or TIMESTAMP column: one cell per day, ordered
      income:  {bins: [0, 10000, 50000]}         # ordered bins [e_i, e_i+1), left-closed, right-open
      paid:    {categories: [false, true]}       # BOOLEAN; dates and timestamps work as categories too
      browser: unknown                           # no public domain
      job:     {categories: [a, b], nullable: true}   # NULL becomes an explicit last cell
      wage:    {bounds: [0, 500000]}             # SUM/AVG/VARIANCE/STDDEV clamp values to [lo, hi]

``bounds: [lo, hi]`` (two finite numbers, ``lo < hi``, within ±2^53, on a numeric column; it may stand alone or beside a
domain) is what SUM, AVG, VARIANCE and STDDEV clamp the column's values to (``dpsql.sql.moments``); an
integer ``range`` serves as bounds when none are declared. Bounds never drop a row. ``bounds: auto`` (or one
end ``auto``: ``[0, auto]``, ``[auto, 0]``) declares no end: the public envelope is ±2^53 (the declared end the
other) and each ``auto`` end is a clip chosen privately by the statement (``dpsql.sql.clipping``).

Values may be written with numpy or pandas scalars (a schema built from a DataFrame): they are turned
into plain Python values first (``dpsql.schema_values``). Domains come from the schema only, never from
the data. At ``register()`` every declared value is cast
to the column's type in the engine (``dpsql.sql.literals``): a value that does not cast is refused,
naming the column, and the cast values are the ones compared with the data. The rule for values the
domain does not cover is :data:`OUT_OF_DOMAIN_RULE`: a row whose value in a column with a declared
domain is NULL (in a column not declared ``nullable``) or outside that domain is dropped inside the
bounded SQL, before contribution bounding. The rule looks at one row at a time, so it is
data-independent and the privacy guarantee is unaffected; nothing about how many rows were dropped is
released. Columns of the table that the schema does not list have an unknown domain.

**Joins.** A table is either *private* (the default) or *public* (``public: true``: no privacy unit and no
contribution bounds — its rows are not protected, so statements may join it freely and read it as they like;
its ``columns`` may declare domains, else a public column's values are read from the table itself).
A private table names the column that holds its privacy unit (``privacy_unit: person_id``), or none
(``privacy_unit: null``: one row is one unit; such a table joins public tables only). The unit column may be a
foreign key to the table that has the unit (``visits.person_id → persons.id``); the referenced column must then
be that table's unit. Two private tables protect the same units when they are one table, when one's unit
column references the other's, or when both reference the same table's unit; only then may a statement join
them, and only along the unit (Google's rule for DP SQL: ``visits.person_id = persons.id``).

``max_rows_per_unit: auto`` leaves the bound to each statement: it spends :data:`CHOICE_SHARE` of its budget
to choose it privately among 1, 2, 3, 4, 6, 8, 11, 16, … (``planner.bound_levels``) up to :data:`AUTO_LIMIT` (or
``{auto: N}``) from a noisy histogram of the units' rows (``dpsql.truncation``, ``planner.BoundChoice``), then
measures with that bound.

``foreign_keys`` maps a column to the ``table.column`` it references (a private or a public table). Joins use
declared keys only: a private table joins a public one on a declared foreign key
(``visits.clinic_id → clinics.id``), and private tables join each other along their unit. A row meets at most
``F`` rows of a public table on its key — ``F`` the most rows one key value has there, computed from the public
table, or declared with the key: ``clinic_id: {references: clinics.id, max_rows: 2}`` (then nothing is read to
compute it, and no more than ``F`` rows of a key are joined whatever the table holds; ``docs/sql.md``, "Joins"). ``max_rows_per_unit`` and ``max_groups_per_unit``
are declared per private table and bound what a unit contributes *after* the joins of a statement, by the same
salted order as today. Whether referenced tables and columns exist is checked when both tables are registered
(in either order), before any row is read.
"""

from __future__ import annotations

import datetime
import json
import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

import yaml

from dpsql.errors import ProgrammingError
from dpsql.schema_values import canonical_value, canonical_values

OUT_OF_DOMAIN_RULE = (
    "rows with a NULL (in a column not declared nullable) or a value outside the declared domain, in any "
    "column with a declared domain, are dropped before contribution bounding, so every statement counts the "
    "same rows; a nullable column has an explicit NULL cell after its declared values; a column without a "
    "declared domain never drops rows (grouped by, its rows of keys that were not released form one hidden "
    "remainder cell)"
)

Scalar = str | int | float | bool | datetime.date | datetime.datetime
DomainKind = Literal["categories", "range", "bins", "keys", "unknown"]
AUTO_LIMIT = 1024  # the largest bound ``max_rows_per_unit: auto`` may choose
CHOICE_SHARE = 0.2  # of a statement's budget, spent choosing its bound when ``max_rows_per_unit: auto``
MAX_RANGE_CELLS = 1 << 20
"""Most values a ``range`` column may span (as many as a WHERE clause may mask): wider columns need
``bins``."""
INT64_LIMIT = 1 << 62  # range bounds beyond this are refused (cell arithmetic stays in int64)
MAX_VALUE_BOUND = float(1 << 53)
"""Largest magnitude of ``bounds`` (SUM/AVG/VARIANCE/STDDEV clamp to them): sums and squares of values
within ±2^53 stay exact in the weights and finite in every answer and error; wider bounds are refused."""


class _RemainderCell:
    """The label of a released key set's remainder cell: rows of keys that were not released."""

    def __repr__(self) -> str:
        return "REMAINDER"


REMAINDER = _RemainderCell()


class BinLabel(str):
    """A bin's label, ``'[lo, hi)'`` — a string like any label, that also knows its edges (``low``, ``high``):
    a quantile answered with a bin has its interval in numbers."""

    low: float
    high: float

    def __new__(cls, low: float, high: float) -> BinLabel:
        label = super().__new__(cls, f"[{_fmt(low)}, {_fmt(high)})")
        label.low, label.high = low, high
        return label

    def __reduce__(self) -> tuple[type[BinLabel], tuple[float, float]]:
        return (BinLabel, (self.low, self.high))
_COLUMN_KEYS = {"categories", "range", "bins", "nullable", "bounds", "clip"}
_SCHEMA_KEYS = {"privacy_unit", "max_rows_per_unit", "max_groups_per_unit", "max_rows_per_group", "columns", "public", "foreign_keys"}
_PRIVATE_KEYS = ("privacy_unit", "max_rows_per_unit", "max_groups_per_unit", "max_rows_per_group")
_SHOWN = reprlib.Repr()  # what an error message shows of a declared value: bounded, whatever its depth
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict, _SHOWN.maxstring, _SHOWN.maxother = 3, 24, 24, 8, 80, 60


def _shown(value: object) -> str:
    return _SHOWN.repr(list(value) if isinstance(value, tuple) else value)


@dataclass(frozen=True)
class ColumnDomain:
    """The public domain of one column.

    ``values`` holds the categories (``categories``), ``(lo, hi)`` (``range``: integers, or dates for
    a range of days), the bin edges (``bins``) or a released key set (``keys``: the keys of an unknown
    column selected privately, see ``dpsql.keys``); it is empty for ``unknown``. Cells are numbered
    ``0 .. size-1``: the declared values in order, then the NULL cell when ``nullable``, then — for
    ``keys`` only — the *remainder* cell, which holds the rows of every key that was not released. It
    is counted in totals over the column but never shown as a group of its own (:attr:`hidden_cells`).

    >>> ColumnDomain("age", "range", (17, 20)).labels()
    (17, 18, 19, 20)
    >>> ColumnDomain("income", "bins", (0, 10, 50), nullable=True).labels()
    ('[0, 10)', '[10, 50)', None)
    """

    name: str
    kind: DomainKind
    values: tuple[Scalar, ...] = ()
    nullable: bool = False
    bounds: tuple[float, float] | None = None  # what SUM/AVG/VARIANCE/STDDEV clamp to
    resolution: float | None = None  # the spacing the engine type puts values on (1: integers, 10^-s: DECIMAL(p, s)); None: none known
    clip: bool = False  # ``clip: auto``: SUM/AVG/VARIANCE/STDDEV clamp at a private clip within the bounds
    auto_ends: tuple[bool, bool] = (False, False)  # ``bounds: auto`` (both) or one end ``auto``: chosen privately

    @property
    def value_resolution(self) -> float | None:
        """The spacing of the values SUM/AVG/VARIANCE/STDDEV read: 1 for an integer ``range`` (rows off the
        integers are dropped), else the column type's (:attr:`resolution`, set at ``register()``); None
        when the type allows any real value (DOUBLE, REAL) or is not known."""
        if self.kind == "range" and not self.is_date_range:
            return 1
        return self.resolution

    @property
    def value_bounds(self) -> tuple[float, float] | None:
        """The declared ``bounds``, else an integer ``range`` with ``lo < hi``, else the outer edges of
        ``bins`` (rows outside them are dropped, so every counted value lies within); None otherwise."""
        if self.bounds is not None:
            return self.bounds
        if self.kind == "range" and not self.is_date_range and self.values[0] < self.values[1]:  # type: ignore[operator]
            return (self.values[0], self.values[1])  # type: ignore[return-value]
        if self.kind == "bins":
            return (self.values[0], self.values[-1])  # type: ignore[return-value]
        return None

    @property
    def is_known(self) -> bool:
        return self.kind != "unknown"

    @property
    def is_ordered(self) -> bool:
        """Ranges and bins are ordered (range queries and hierarchies apply)."""
        return self.kind in ("range", "bins")

    @property
    def is_date_range(self) -> bool:
        """A range of days (on a DATE column, or a TIMESTAMP column: :attr:`is_timestamp_range`)."""
        return self.kind == "range" and isinstance(self.values[0], datetime.date)

    @property
    def is_timestamp_range(self) -> bool:
        """A range of days on a TIMESTAMP column (its ends are midnights, set at ``register()``): a value is an
        instant, counted in the cell of its day, and a cell's label is its day's midnight."""
        return self.kind == "range" and isinstance(self.values[0], datetime.datetime)

    @property
    def value_cells(self) -> int:
        """Number of cells for declared (non-NULL) values."""
        if self.kind in ("categories", "keys"):
            return len(self.values)
        if self.kind == "range":
            return range_offset(self.values[1], self.values[0]) + 1
        if self.kind == "bins":
            return len(self.values) - 1
        return 0

    @property
    def size(self) -> int:
        """Number of cells, the NULL and remainder cells included."""
        return self.value_cells + int(self.nullable) + int(self.kind == "keys")

    @property
    def null_cell(self) -> int | None:
        return self.value_cells if self.nullable else None

    @property
    def hidden_cells(self) -> tuple[int, ...]:
        """Cells counted in totals but never shown as a group: a key set's remainder."""
        return (self.size - 1,) if self.kind == "keys" else ()

    def labels(self) -> tuple[object, ...]:
        """The value a released row shows for each cell (a bin shows as ``'[lo, hi)'``, NULL as None,
        the remainder of a key set as :data:`REMAINDER`, which no released row shows)."""
        return self._labels

    @cached_property
    def _labels(self) -> tuple[object, ...]:  # computed once: compiling a WHERE clause asks for them per cell
        if self.kind in ("categories", "keys"):
            declared: tuple[object, ...] = self.values
        elif self.kind == "range":
            low = self.values[0]
            declared = tuple(range_value(low, i) for i in range(self.value_cells))
        elif self.kind == "bins":
            edges = self.values
            declared = tuple(BinLabel(edges[i], edges[i + 1]) for i in range(len(edges) - 1))  # type: ignore[arg-type]
        else:
            declared = ()
        return declared + ((None,) if self.nullable else ()) + ((REMAINDER,) if self.kind == "keys" else ())

    @cached_property
    def cell_of_value(self) -> dict[object, int]:
        """Declared value → its cell (not for bins, whose cells are intervals): a WHERE literal's cell by
        lookup, so an IN list of k values costs O(k), not O(k · cells)."""
        index: dict[object, int] = {}
        for cell, label in enumerate(self._labels[: self.value_cells]):
            index.setdefault(label, cell)
        return index

    def describe(self) -> str:
        null = ", nullable" if self.nullable else ""
        if self.kind == "categories":
            return f"categories {list(self.values)}{null}"
        if self.kind == "range":
            if self.is_timestamp_range:
                days = ", ".join(str(v.date()) for v in self.values)  # type: ignore[attr-defined]
                return f"date range (days) [{days}] of timestamps, each counted in its day{null}"
            what = "date range (days)" if self.is_date_range else "integer range"
            return f"{what} [{self.values[0]}, {self.values[1]}]{null}"
        if self.kind == "bins":
            return f"bins with edges {list(self.values)} (left-closed){null}"
        if self.kind == "keys":
            null_key = " and NULL" if self.nullable else ""
            return f"{len(self.values)} released key(s){null_key}, plus one remainder cell for the rows of all other keys"
        return "unknown domain"


def range_offset(value: object, low: object) -> int:
    """Cell number of ``value`` in a range starting at ``low`` (days for dates)."""
    if isinstance(low, datetime.date):
        return (value - low).days  # type: ignore[operator]
    return int(value) - int(low)  # type: ignore[call-overload]


def range_value(low: object, offset: int) -> object:
    """The value of cell ``offset`` of a range starting at ``low``."""
    if isinstance(low, datetime.date):
        return low + datetime.timedelta(days=offset)
    return int(low) + offset  # type: ignore[call-overload]


def _fmt(number: Scalar) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)


@dataclass(frozen=True)
class ForeignKey:
    """A declared key: ``column`` of this table references ``referenced`` of ``table`` (``visits.person_id → persons.id``)."""

    column: str
    table: str
    referenced: str
    max_rows: int | None = None  # declared: at most this many rows of the referenced table per key value (the fan-out)

    def __str__(self) -> str:
        most = "" if self.max_rows is None else f" (at most {self.max_rows} row(s) per key)"
        return f"{self.column} → {self.table}.{self.referenced}{most}"


@dataclass(frozen=True)
class Schema:
    """Privacy metadata of one table.

    >>> s = Schema.load({"privacy_unit": None, "columns": {"sex": {"categories": ["F", "M"]}}})
    >>> s.contributions, s.column("sex").size, s.column("other").kind
    (1, 2, 'unknown')
    >>> v = Schema.load({"privacy_unit": "person_id", "foreign_keys": {"person_id": "persons.id"}, "max_rows_per_unit": 5})
    >>> str(v.foreign_key("person_id")), Schema.load({"public": True}).public
    ('person_id → persons.id', True)
    """

    privacy_unit: str | None
    max_rows_per_unit: int
    columns: tuple[ColumnDomain, ...]
    max_groups_per_unit: int = 1  # group cells of COUNT(DISTINCT unit), and keys of an unknown GROUP BY column, one unit may count in
    max_rows_per_group: int | None = None  # rows per unit and unknown key (None: max_rows_per_unit)
    public: bool = False  # no privacy unit, no bounds: the rows are not protected (module doc, "Joins")
    choose_bound: bool = False  # max_rows_per_unit: auto — the bound is chosen per statement, max_rows_per_unit is its largest
    foreign_keys: tuple[ForeignKey, ...] = ()

    def foreign_key(self, column: str) -> ForeignKey | None:
        """The declared foreign key of ``column``, if any."""
        for key in self.foreign_keys:
            if key.column == column:
                return key
        return None

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The columns the schema names outside ``columns``: the unit column and the foreign keys."""
        named = [self.privacy_unit] if self.privacy_unit is not None else []
        return tuple(dict.fromkeys(named + [k.column for k in self.foreign_keys]))

    @property
    def contributions(self) -> int:
        """How many rows one privacy unit may contribute after bounding (the L1 sensitivity of a count)."""
        return self.max_rows_per_unit

    def column(self, name: str) -> ColumnDomain:
        """The declared domain of ``name``; a column the schema does not list has an unknown domain."""
        for column in self.columns:
            if column.name == name:
                return column
        return ColumnDomain(name, "unknown")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @classmethod
    def load(cls, source: Schema | Mapping[str, object] | str | Path) -> Schema:
        """Load from a dict, a path to a ``.yaml``/``.yml``/``.json`` file, or YAML/JSON text."""
        if isinstance(source, Schema):
            return source
        if isinstance(source, Path) or (isinstance(source, str) and _looks_like_path(source)):
            path = Path(source)
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as error:
                raise ProgrammingError(f"cannot read schema file {str(path)!r}: {error.strerror}") from error
            return cls.from_dict(_parse_text(text, json_only=path.suffix.lower() == ".json", origin=str(path)))
        if isinstance(source, str):
            return cls.from_dict(_parse_text(source, json_only=False, origin="schema text"))
        if isinstance(source, Mapping):
            return cls.from_dict(source)
        raise ProgrammingError(
            f"a schema must be a dict, a YAML/JSON file path or YAML/JSON text, got {type(source).__name__}"
        )

    @classmethod
    def from_dict(cls, document: object) -> Schema:
        """Validate a schema document; every error names the offending key or column."""
        if not isinstance(document, Mapping):
            raise ProgrammingError(f"a schema must be a mapping with keys {sorted(_SCHEMA_KEYS)}")
        unexpected = set(document) - _SCHEMA_KEYS
        if unexpected:
            raise ProgrammingError(
                f"unknown schema key(s) {sorted(map(str, unexpected))}; allowed: {sorted(_SCHEMA_KEYS)}"
            )
        foreign_keys = _foreign_keys(document.get("foreign_keys", {}))
        public = canonical_value(document.get("public", False))
        if not isinstance(public, bool):
            raise ProgrammingError(f"public must be true or false, got {_shown(public)}")
        if public:
            private = [key for key in _PRIVATE_KEYS if key in document]
            if private:
                raise ProgrammingError(
                    f"a public table has no privacy unit and no contribution bounds: remove {private} (or drop public: true "
                    "to protect its rows)"
                )
            columns = document.get("columns", {})
            if not isinstance(columns, Mapping):
                raise ProgrammingError("columns must map column names to domains")
            parsed = tuple(_column_from_spec(str(name), spec) for name, spec in columns.items())
            return cls(privacy_unit=None, max_rows_per_unit=1, columns=parsed, public=True, foreign_keys=foreign_keys)
        unit = canonical_value(document.get("privacy_unit"))
        if unit is not None and (not isinstance(unit, str) or not unit):
            raise ProgrammingError(f"privacy_unit must be a column name or null, got {_shown(unit)}")
        bound, choose_bound = _rows_per_unit(canonical_value(document.get("max_rows_per_unit", 1)))
        if choose_bound and unit is None:
            raise ProgrammingError("max_rows_per_unit: auto needs a privacy_unit column: without one, one row is one unit")
        if unit is None and bound != 1:
            raise ProgrammingError(
                "max_rows_per_unit must be 1 when privacy_unit is null (one row = one unit); "
                "name the privacy-unit column to bound several rows per unit"
            )
        key_bounds = {}
        for key in ("max_groups_per_unit", "max_rows_per_group"):
            value = canonical_value(document.get(key, 1 if key == "max_groups_per_unit" else None))
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ProgrammingError(
                    f"{key} must be a positive integer (at least 1), got {_shown(value)}; it bounds what one unit "
                    "contributes to a GROUP BY on a column with no declared domain"
                    + (" and the groups COUNT(DISTINCT unit) counts it in" if key == "max_groups_per_unit" else "")
                )
            if unit is None and value not in (None, 1):
                raise ProgrammingError(f"{key} must be 1 when privacy_unit is null (one row = one unit)")
            key_bounds[key] = value
        columns = document.get("columns", {})
        if not isinstance(columns, Mapping):
            raise ProgrammingError("columns must map column names to domains")
        parsed = tuple(_column_from_spec(str(name), spec) for name, spec in columns.items())
        return cls(privacy_unit=unit, max_rows_per_unit=bound, columns=parsed, foreign_keys=foreign_keys, choose_bound=choose_bound, **key_bounds)


def _rows_per_unit(value: object) -> tuple[int, bool]:
    """``max_rows_per_unit``: a positive integer, ``auto`` or ``{auto: N}`` (the bound, and whether it is chosen)."""
    if value == "auto":
        return AUTO_LIMIT, True
    if isinstance(value, Mapping) and set(value) == {"auto"}:
        value = canonical_value(value["auto"])
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 30:
            raise ProgrammingError(f"max_rows_per_unit: {{auto: N}} needs the largest bound N, a positive integer up to 2^30; got {_shown(value)}")
        return value, True
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProgrammingError(f"max_rows_per_unit must be a positive integer, auto or {{auto: <largest>}}, got {_shown(value)}")
    return value, False


def _foreign_keys(document: object) -> tuple[ForeignKey, ...]:
    """``foreign_keys: {column: table.column, …}`` (the table may be qualified: ``schema.table.column``); a key with a
    declared fan-out is ``column: {references: table.column, max_rows: F}``."""
    if not isinstance(document, Mapping):
        raise ProgrammingError(f"foreign_keys must map columns to the table.column they reference, got {_shown(document)}")
    keys = []
    for column, target in document.items():
        target, most = _key_target(column, canonical_value(target))
        parts = target.split(".") if isinstance(target, str) else []
        if not isinstance(column, str) or not column or len(parts) < 2 or not all(parts):
            raise ProgrammingError(
                f"foreign_keys: {_shown(column)}: {_shown(target)} must name the referenced table and column as table.column "
                "(e.g. person_id: persons.id)"
            )
        keys.append(ForeignKey(column, ".".join(parts[:-1]), parts[-1], most))
    return tuple(keys)


def _key_target(column: object, target: object) -> tuple[object, int | None]:
    """A key's ``table.column`` and its declared fan-out (None: computed from the referenced table)."""
    if not isinstance(target, Mapping):
        return target, None
    if set(target) - {"references", "max_rows"} or "references" not in target:
        raise ProgrammingError(
            f"foreign_keys: {_shown(column)}: {_shown(target)} must be table.column or {{references: table.column, max_rows: <positive "
            "integer>}}"
        )
    most = canonical_value(target.get("max_rows"))
    if "max_rows" in target and (isinstance(most, bool) or not isinstance(most, int) or most < 1):
        raise ProgrammingError(
            f"foreign_keys: {_shown(column)}: max_rows must be a positive integer (the most rows of the referenced table one key value "
            f"has), got {_shown(most)}"
        )
    return canonical_value(target["references"]), most


def _looks_like_path(text: str) -> bool:
    """Whether schema text names a file: one line, not a JSON/YAML mapping, with a schema suffix or an
    existing file's name (text too long or odd for a file name is not one)."""
    if "\n" in text or text.lstrip().startswith(("{", "[")):
        return False
    if text.lower().endswith((".yaml", ".yml", ".json")):
        return True
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def _parse_text(text: str, json_only: bool, origin: str) -> object:
    try:
        return json.loads(text) if json_only else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ProgrammingError(f"cannot parse {origin}: {error}") from error
    except RecursionError:
        raise ProgrammingError(f"cannot parse {origin}: it nests too deeply for a schema (a schema is at most four levels deep)") from None


def _column_from_spec(name: str, spec: object) -> ColumnDomain:
    if spec == "unknown" or spec is None:
        return ColumnDomain(name, "unknown")
    if not isinstance(spec, Mapping):
        raise ProgrammingError(
            f"column {name!r}: a domain is 'unknown' or a mapping with one of categories, range, bins (and/or bounds); got {_shown(spec)}"
        )
    unexpected = set(spec) - _COLUMN_KEYS
    if unexpected:
        raise ProgrammingError(
            f"column {name!r}: unknown key(s) {sorted(map(str, unexpected))}; allowed: {sorted(_COLUMN_KEYS)}"
        )
    bounds, auto_ends = _value_bounds(name, canonical_values(spec["bounds"])) if "bounds" in spec else (None, (False, False))
    kinds = [k for k in ("categories", "range", "bins") if k in spec]
    nullable = canonical_value(spec.get("nullable", False))
    if not isinstance(nullable, bool):
        raise ProgrammingError(f"column {name!r}: nullable must be true or false, got {_shown(nullable)}")
    clip = _clip(name, canonical_value(spec.get("clip")), bounds is not None or "range" in spec)
    if clip and any(auto_ends):
        raise ProgrammingError(f"column {name!r}: bounds with an auto end already clip there privately; drop clip: auto")
    if not kinds and bounds is not None:
        if nullable:
            raise ProgrammingError(f"column {name!r}: nullable applies to a declared domain; a column with bounds only keeps its NULLs")
        return ColumnDomain(name, "unknown", bounds=bounds, clip=clip, auto_ends=auto_ends)
    if len(kinds) != 1:
        raise ProgrammingError(f"column {name!r}: declare exactly one of categories, range, bins (got {kinds})")
    kind = kinds[0]
    values = canonical_values(spec[kind])
    if not isinstance(values, tuple):
        raise ProgrammingError(f"column {name!r}: {kind} must be a list, got {_shown(values)}")
    if kind == "categories":
        _check_categories(name, values)
    elif kind == "range":
        values = _range_bounds(name, values)
    else:
        _check_bins(name, values)
    return ColumnDomain(name, kind, values, nullable, bounds, clip=clip, auto_ends=auto_ends)


def _clip(name: str, raw: object, bounded: bool) -> bool:
    """``clip: auto`` (SUM/AVG/VARIANCE/STDDEV clamp at a private clip within the bounds), or absent."""
    if raw is None:
        return False
    if raw != "auto":
        raise ProgrammingError(f"column {name!r}: clip must be 'auto' (a private clip within the bounds), got {raw!r}")
    if not bounded:
        raise ProgrammingError(f"column {name!r}: clip: auto chooses a clip within bounds; declare them, e.g. bounds: [0, 10000000]")
    return True


def _value_bounds(name: str, raw: object) -> tuple[tuple[float, float], tuple[bool, bool]]:
    """``bounds: [lo, hi]``: two finite numbers with ``lo < hi``; ``auto`` for both or for one end (the envelope
    ±2^53 there, the end chosen privately per statement). Returns the bounds and which ends are ``auto``."""
    raw = ("auto", "auto") if raw == "auto" else raw
    if isinstance(raw, (list, tuple)) and len(raw) == 2 and any(v == "auto" for v in raw):
        ends = (raw[0] == "auto", raw[1] == "auto")
        raw = (-MAX_VALUE_BOUND if ends[0] else raw[0], MAX_VALUE_BOUND if ends[1] else raw[1])
    else:
        ends = (False, False)
    if not isinstance(raw, (list, tuple)) or len(raw) != 2 or not all(_finite_number(v) for v in raw):
        raise ProgrammingError(
            f"column {name!r}: bounds must be [lo, hi] with two finite numbers (either may be auto), or auto; got {_shown(raw)}"
        )
    low, high = raw
    if not low < high:
        raise ProgrammingError(f"column {name!r}: bounds [lo, hi] need lo < hi, got {list(raw)}")
    if max(abs(low), abs(high)) > MAX_VALUE_BOUND:
        raise ProgrammingError(
            f"column {name!r}: bounds {list(raw)} lie beyond ±2^53 ({MAX_VALUE_BOUND:.3g}), where sums of bounded values "
            "lose exactness and can overflow; declare the column in larger units (e.g. thousands) so that its bounds fit"
        )
    return (low, high), ends


def _check_categories(name: str, values: tuple[object, ...]) -> None:
    if not values:
        raise ProgrammingError(f"column {name!r}: categories must not be empty")
    if set(map(type, values)) == {str}:  # all text (10⁶ categories: one pass)
        if len(set(values)) != len(values):
            raise ProgrammingError(f"column {name!r}: categories repeat a value")
        return
    for value in values:
        if value is None or not isinstance(value, (str, int, float, bool, datetime.date)):
            raise ProgrammingError(
                f"column {name!r}: category {_shown(value)} is not a string, number, boolean or date "
                "(declare nullable: true for NULL)"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ProgrammingError(f"column {name!r}: category {_shown(value)} is not a finite number")
    kinds = {type(v) if not isinstance(v, (int, float)) or isinstance(v, bool) else float for v in values}
    if len(kinds) > 1:
        raise ProgrammingError(f"column {name!r}: categories mix types {sorted(k.__name__ for k in kinds)}")
    if len(set(values)) != len(values):
        raise ProgrammingError(f"column {name!r}: categories repeat a value")


def _range_bounds(name: str, values: tuple[object, ...]) -> tuple[object, ...]:
    """``[lo, hi]``: two integers, or two dates (``date`` objects or ISO ``YYYY-MM-DD`` strings)."""
    integers = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    dates = tuple(as_day(v) for v in values)
    if len(values) != 2 or not (integers or all(d is not None for d in dates)):
        raise ProgrammingError(
            f"column {name!r}: range must be [lo, hi] with two integers or two dates (YYYY-MM-DD), got {_shown(values)}"
        )
    bounds = values if integers else dates
    if integers and any(abs(v) > INT64_LIMIT for v in values):  # type: ignore[arg-type]
        raise ProgrammingError(f"column {name!r}: range bounds must lie within ±2^62, got {list(values)}; declare bins instead")
    if bounds[0] > bounds[1]:  # type: ignore[operator]
        raise ProgrammingError(f"column {name!r}: range [lo, hi] needs lo <= hi, got {list(values)}")
    if range_offset(bounds[1], bounds[0]) + 1 > MAX_RANGE_CELLS:
        raise ProgrammingError(
            f"column {name!r}: range {list(values)} has more than {MAX_RANGE_CELLS} values; declare bins instead"
        )
    return bounds


def as_day(value: object) -> datetime.date | None:
    """A date, or the date an ISO text ``YYYY-MM-DD`` names; None for anything else (an instant included)."""
    if isinstance(value, datetime.datetime):
        return None  # a range of timestamps has no natural cells; use bins or categories
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            return None
    return None


def _finite_number(value: object) -> bool:
    """A real number (not a bool) that a double represents as a finite value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond the doubles
        return False


def _check_bins(name: str, values: tuple[object, ...]) -> None:
    numeric = all(_finite_number(v) for v in values)
    if len(values) < 2 or not numeric:
        raise ProgrammingError(f"column {name!r}: bins must be at least two finite numeric edges, got {_shown(values)}")
    if any(a >= b for a, b in zip(values, values[1:])):  # type: ignore[operator]
        raise ProgrammingError(f"column {name!r}: bin edges must be strictly increasing, got {list(values)}")
