"""Released rows as DataFrames and Arrow tables, DuckDB-style, with their standard errors on request.

:class:`ResultFrames` gives a cursor and a batch result set the methods of DuckDB's Python API::

    cursor.execute("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", epsilon=0.5)
    cursor.df()                  # pandas (also fetchdf()); df(errors=True) adds n_stderr after n
    cursor.arrow()               # pyarrow.Table (also fetch_arrow_table())
    cursor.pl()                  # polars.DataFrame

Like DuckDB's, these take the rows not fetched yet (a cursor advances; a batch result set has no
position). A released column gets its standard error in ``<column>_stderr`` right after it when
``errors=True``; group keys have none. pandas, pyarrow and polars are optional: each is imported on
first use, and a missing one raises :class:`~dpsql.errors.InterfaceError` saying what to install.
Everything here is post-processing of released values: free of privacy cost.

A class mixing this in provides ``_frame_source()`` (all rows of its result, their errors and the
explanation) and ``fetchall()`` (the rows not fetched yet: a tail of those rows).
"""

from __future__ import annotations

import html
import importlib
from collections.abc import Sequence
from statistics import NormalDist
from types import ModuleType
from typing import Any, NamedTuple

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


def frame_columns(source: FrameSource, rows: Sequence[Row], errors: Sequence[Row], with_errors: bool) -> list[tuple[str, list[object]]]:
    """``(name, values)`` per output column; with ``with_errors`` each released column is followed by
    ``<name>_stderr`` (the error columns are chosen from every row, so they do not depend on fetching)."""
    names = [str(d[0]) for d in source.description]
    carrying = set(error_columns(source.errors, len(names))) if with_errors else set()
    columns: list[tuple[str, list[object]]] = []
    for index, name in enumerate(names):
        columns.append((name, [row[index] for row in rows]))
        if index in carrying:
            columns.append((name + ERROR_SUFFIX, [error[index] for error in errors]))
    return columns


class ResultFrames:
    """DataFrame / Arrow / polars conversions, a notebook display and a plot of released rows."""

    def _frame_source(self) -> FrameSource:  # pragma: no cover - provided by the class mixing this in
        raise NotImplementedError

    def fetchall(self) -> list[Row]:  # pragma: no cover - provided by the class mixing this in
        raise NotImplementedError

    def _unfetched(self, with_errors: bool) -> list[tuple[str, list[object]]]:
        source = self._frame_source()
        rows = self.fetchall()  # the rows not fetched yet: a tail of source.rows
        errors = source.errors[len(source.rows) - len(rows) :]
        return frame_columns(source, rows, errors, with_errors)

    # -- pandas ---------------------------------------------------------------------------------------
    def df(self, errors: bool = False) -> Any:
        """The rows not fetched yet as a ``pandas.DataFrame``; ``errors=True`` adds ``<column>_stderr``."""
        pandas = optional_module("pandas", "df()")
        columns = self._unfetched(errors)
        frame = pandas.DataFrame({index: _pandas_series(pandas, values) for index, (_, values) in enumerate(columns)})
        frame.columns = [name for name, _ in columns]  # names may repeat (two COUNT(*) columns)
        return frame

    def fetchdf(self, errors: bool = False) -> Any:
        """Same as :meth:`df` (DuckDB's name)."""
        return self.df(errors)

    # -- Arrow ----------------------------------------------------------------------------------------
    def arrow(self, errors: bool = False) -> Any:
        """The rows not fetched yet as a ``pyarrow.Table``; ``errors=True`` adds ``<column>_stderr``."""
        pyarrow = optional_module("pyarrow", "arrow()")
        columns = self._unfetched(errors)
        return pyarrow.Table.from_arrays([_arrow_array(pyarrow, values) for _, values in columns], names=[n for n, _ in columns])

    def fetch_arrow_table(self, errors: bool = False) -> Any:
        """Same as :meth:`arrow` (DuckDB's name)."""
        return self.arrow(errors)

    # -- polars ---------------------------------------------------------------------------------------
    def pl(self, errors: bool = False) -> Any:
        """The rows not fetched yet as a ``polars.DataFrame``; ``errors=True`` adds ``<column>_stderr``."""
        polars = optional_module("polars", "pl()")
        columns = self._unfetched(errors)
        names = [name for name, _ in columns]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ProgrammingError(f"polars needs distinct column names; rename {repeated} with AS in the SELECT list")
        return polars.DataFrame({name: polars.Series(name, values, strict=False) for name, values in columns})

    # -- notebooks ------------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        """Jupyter's rich display: values ± standard errors, then the cost and strategy in one line.
        Shows every row of the result (it does not fetch)."""
        from dpsql import notebook

        return notebook.result_html(self._frame_source())

    def plot(self, level: float = 0.95, ax: Any = None) -> Any:
        """Released values with their ``level`` confidence intervals, one bar per row (labelled by its
        group keys) and one colour per released column; returns the matplotlib Axes. Shows every row."""
        from dpsql import notebook

        return notebook.plot_result(self._frame_source(), level, ax)


def _pandas_series(pandas: ModuleType, values: list[object]) -> Any:
    """Integer keys with NULLs (rolled up by CUBE, a nullable column) stay integers: pandas' Int64."""
    present = [v for v in values if v is not None]
    if None in values and present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pandas.array(values, dtype="Int64")
    return values


def _arrow_array(pyarrow: ModuleType, values: list[object]) -> Any:
    if values and all(v is None or isinstance(v, float) for v in values):
        return pyarrow.array(values, type=pyarrow.float64())
    try:
        return pyarrow.array(values)
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError):  # keys of mixed types (categories [0, 'a'])
        return pyarrow.array([None if v is None else str(v) for v in values])


def interval_half_width(level: float) -> float:
    """z such that value ± z·stderr covers ``level`` (normal approximation of the released noise)."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ProgrammingError(f"the confidence level must lie strictly between 0 and 1, got {level!r}")
    return NormalDist().inv_cdf(0.5 + level / 2)


def escape(value: object) -> str:
    return html.escape("NULL" if value is None else str(value))
