"""What a result shows (:class:`FrameSource`) and the helpers its renderings share: the columns
with their standard errors, optional modules imported on first use, confidence half-widths, HTML
escaping. Used by :mod:`dpsql.frames` (DataFrames, Arrow) and :mod:`dpsql.notebook` (HTML, plots)."""

from __future__ import annotations

import html
import importlib
from collections.abc import Sequence
from statistics import NormalDist
from types import ModuleType
from typing import NamedTuple

from dpsql.errors import InterfaceError, ProgrammingError

Row = tuple[object, ...]
ERROR_SUFFIX = "_stderr"
HTML_ROWS = 50  # rows shown by the notebook display before eliding the middle

_EXTRAS = {"pandas": "pandas", "pyarrow": "arrow", "polars": "polars", "matplotlib.pyplot": "plot", "matplotlib.dates": "plot"}


class FrameSource(NamedTuple):
    """What a result shows: the PEP 249 description, every row, the standard errors aligned with the
    rows (None in key columns) and how the statement was answered (None when unknown)."""

    description: Sequence[Sequence[object]]
    rows: Sequence[Row]
    errors: Sequence[Row]
    explanation: str | None = None
    errors_shown: bool = False  # the rows already hold <column>_stderr columns (``ResultSet.with_error_columns``)


def optional_module(name: str, purpose: str) -> ModuleType:
    """Import an optional dependency, or raise a dpsql error naming the extra that installs it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        extra = _EXTRAS.get(name, name)
        raise InterfaceError(
            f"{purpose} needs {name.split('.')[0]}, which is not installed: pip install 'dpsql[{extra}]'"
        ) from None


def error_columns(errors: Sequence[Row], width: int) -> list[int]:
    """The columns that carry a standard error in some row (released values, not keys)."""
    return [column for column in range(width) if any(error[column] is not None for error in errors)]


def error_layout(description: Sequence[Sequence[object]], errors: Sequence[Row]) -> list[tuple[int, bool]]:
    """The output columns with errors shown: ``(column, False)`` for each column, followed by ``(column,
    True)`` — its ``<name>_stderr`` — when it carries an error in some row (chosen from every row, so the
    layout does not depend on fetching)."""
    carrying = set(error_columns(errors, len(description)))
    return [entry for index in range(len(description)) for entry in ((index, False), (index, True))[: 1 + (index in carrying)]]


def frame_columns(source: FrameSource, rows: Sequence[Row], errors: Sequence[Row], with_errors: bool) -> list[tuple[str, list[object]]]:
    """``(name, values)`` per output column; with ``with_errors`` each released column is followed by
    ``<name>_stderr`` (:func:`error_layout`)."""
    names = [str(d[0]) for d in source.description]
    shown = with_errors and not source.errors_shown
    layout = error_layout(source.description, source.errors) if shown else [(index, False) for index in range(len(names))]
    return [
        (names[index] + ERROR_SUFFIX, [error[index] for error in errors]) if is_error else (names[index], [row[index] for row in rows])
        for index, is_error in layout
    ]


def interval_half_width(level: float) -> float:
    """z such that value ± z·stderr covers ``level`` (normal approximation of the released noise)."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ProgrammingError(f"the confidence level must lie strictly between 0 and 1, got {level!r}")
    return NormalDist().inv_cdf(0.5 + level / 2)


def escape(value: object) -> str:
    return html.escape("NULL" if value is None else str(value))
