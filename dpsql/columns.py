"""Released rows kept as columns until they are read.

A batch may release millions of cells (all 364 three-way marginals of Adult: 20.9 million). Built as
Python tuples at once they cost several hundred bytes each; kept as the arrays they are computed in — a
float per value and per standard error, a cell number per group key — they cost a few dozen, and a row
becomes a tuple of plain Python values (``float``, the domain's labels, ``None``) only when it is read.

:class:`ColumnRows` is a read-only sequence of such rows over *parts* (a statement's grouping sets, one
after the other), each a tuple of equally long :class:`Column`\\ s; it iterates in chunks, indexes and
slices like a list (a slice is a list of tuples), and compares equal to any sequence of the same rows.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar, overload

import numpy as np

Row = tuple[object, ...]
CHUNK = 1 << 14  # rows turned into tuples at a time while iterating
T = TypeVar("T")


SNAP = 1e-9
"""Released numbers are snapped to the shortest decimal within this relative distance (far below any
noise): no float residue (``1484.9999999999998`` is 1485) and at most 10 significant digits."""


def clean_number(value: T, error: object = None) -> T:
    """A released float as the decimal with the fewest significant digits within a relative :data:`SNAP`
    of it — ``41675.00000000001`` is ``41675.0``, ``0.30000000000000004`` is ``0.3``, a noisy value keeps
    its first 10 digits — and never farther than a hundredth of its ``error`` when it has one (a count of
    10¹¹ rows keeps its units); ``-0.0`` as ``0.0``; anything else (a key, a label, a date, None, inf, NaN)
    as it is. Post-processing of released values: free."""
    if type(value) is not float or not math.isfinite(value) or value == 0.0:
        return 0.0 if type(value) is float and value == 0.0 else value  # type: ignore[return-value]
    if value.is_integer() and abs(value) < 1e9:  # a tolerance below 1: no fewer digits are within, it is its own shortest
        return value
    tolerance = SNAP * abs(value)
    if type(error) is float and error > 0:
        tolerance = min(tolerance, error / 100)
    best, most = value, 17  # 17 significant digits: the float itself
    for digits in range(10, 17):  # 10 digits are within 5·10⁻¹⁰ (unless the error is tighter)
        rounded = float(f"{value:.{digits}g}")
        if abs(rounded - value) <= tolerance:
            best, most = rounded, digits
            break
    # k digits within ⇒ k + 1 within (k + 1 digits round to the nearest of a superset of the k-digit decimals): the
    # fewest by stepping down from the first within — a noisy value needs one or two steps — then by bisection
    fewest, probe, steps = 1, most - 1, 0
    while fewest < most:
        rounded = float(f"{value:.{probe}g}")
        if abs(rounded - value) <= tolerance:
            best, most, steps = rounded, probe, steps + 1
        else:
            fewest = probe + 1
        probe = most - 1 if steps < 2 else (fewest + most) // 2
    return best  # type: ignore[return-value]


class Column(ABC):
    """One column of a part: ``len()`` values, read as a list of plain Python values by :meth:`chunk`."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def chunk(self, start: int, stop: int) -> list[object]: ...


@dataclass(frozen=True, eq=False)
class Floats(Column):
    """Numbers kept as a float array, read as clean Python floats (:func:`clean_number`, within a hundredth
    of each value's standard error when ``errors`` are given)."""

    values: np.ndarray
    errors: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.values)

    def chunk(self, start: int, stop: int) -> list[object]:
        values = self.values[start:stop].tolist()
        if self.errors is None:
            return [clean_number(v) for v in values]
        return [clean_number(v, e) for v, e in zip(values, self.errors[start:stop].tolist())]


@dataclass(frozen=True, eq=False)
class Labels(Column):
    """A group key: each row's cell number, read as that cell's label (``labels``: an object array, the
    column's :func:`label_array`)."""

    cells: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.cells)

    def chunk(self, start: int, stop: int) -> list[object]:
        return self.labels[self.cells[start:stop]].tolist()


def label_array(labels: Sequence[object]) -> np.ndarray:
    """Labels as a read-only object array, element by element (labels that are tuples stay whole)."""
    lookup = np.empty(len(labels), dtype=object)
    lookup[:] = list(labels)
    lookup.setflags(write=False)
    return lookup


@dataclass(frozen=True, eq=False)
class Objects(Column):
    """Values that are not all numbers (quantiles, aggregates that may be NULL), as a list."""

    values: list[object]

    def __len__(self) -> int:
        return len(self.values)

    def chunk(self, start: int, stop: int) -> list[object]:
        return self.values[start:stop]


@dataclass(frozen=True, eq=False)
class Repeated(Column):
    """One value in every row (a rolled-up key's NULL, a GROUPING() constant, a key's missing error)."""

    value: object
    length: int

    def __len__(self) -> int:
        return self.length

    def chunk(self, start: int, stop: int) -> list[object]:
        return [self.value] * (min(stop, self.length) - max(start, 0))


class ColumnRows(Sequence[Row]):
    """The rows of ``parts`` (each a tuple of equally long columns), part after part (module doc)."""

    def __init__(self, parts: Sequence[tuple[Column, ...]]) -> None:
        self._parts = [part for part in parts if part and len(part[0])]
        self._starts = [0]
        for part in self._parts:
            self._starts.append(self._starts[-1] + len(part[0]))

    def __len__(self) -> int:
        return self._starts[-1]

    def __iter__(self) -> Iterator[Row]:
        return self._between(0, len(self))

    def _between(self, start: int, stop: int) -> Iterator[Row]:
        """Rows ``start .. stop-1``, a chunk of each column at a time."""
        for part, first in zip(self._parts, self._starts):
            low, high = max(start - first, 0), min(stop - first, len(part[0]))
            for begin in range(low, high, CHUNK):
                yield from zip(*(column.chunk(begin, min(begin + CHUNK, high)) for column in part))

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return list(self._between(start, stop))
            return [self[i] for i in range(start, stop, step)]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("row index out of range")
        part = bisect.bisect_right(self._starts, index) - 1
        offset = index - self._starts[part]
        return tuple(column.chunk(offset, offset + 1)[0] for column in self._parts[part])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: object) -> list[Row]:
        """Concatenation gives a list, as the rows' former list type did (``a.rows + b.rows``)."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return [*self, *other]

    def __radd__(self, other: object) -> list[Row]:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return [*other, *self]

    def __repr__(self) -> str:
        return repr(list(self))
