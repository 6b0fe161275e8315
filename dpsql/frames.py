"""Released rows as DataFrames and Arrow tables, DuckDB-style, with their standard errors on request.

:class:`ResultFrames` gives a cursor and a batch result set the methods of DuckDB's Python API::

    cursor.execute("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", epsilon=0.5)
    cursor.df()                  # pandas (also fetchdf()); df(errors=True) adds n_stderr after n
    cursor.arrow()               # pyarrow.Table (also fetch_arrow_table())
    cursor.pl()                  # polars.DataFrame
    cursor.fetchnumpy()          # {column: numpy array}

Like DuckDB's, these take the rows not fetched yet (a cursor advances; a batch result set has no
position). A released column gets its standard error in ``<column>_stderr`` right after it when
``errors=True``; group keys have none. pandas, pyarrow and polars are optional: each is imported on
first use, and a missing one raises :class:`~dpsql.errors.InterfaceError` saying what to install.
Everything here is post-processing of released values: free of privacy cost.

A class mixing this in provides ``_frame_source()`` (all rows of its result, their errors and the
explanation) and ``fetchall()`` (the rows not fetched yet: a tail of those rows).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from dpsql import notebook
from dpsql.errors import ProgrammingError
from dpsql.frame_source import FrameSource, Row, frame_columns, optional_module

__all__ = ["FrameSource", "ResultFrames"]


class ResultFrames:
    """DataFrame / Arrow / polars conversions, a notebook display and a plot of released rows."""

    # provided by the class mixing this in (module doc): every row of the result, and the rows not fetched yet
    _frame_source: Callable[[], FrameSource]
    fetchall: Callable[[], list[Row]]

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

    # -- numpy ----------------------------------------------------------------------------------------
    def fetchnumpy(self, errors: bool = False) -> dict[str, Any]:
        """The rows not fetched yet as numpy arrays by column name, as DuckDB's ``fetchnumpy``: integers as
        int64, numbers as float64, anything else as objects; a column with NULLs (keys rolled up by CUBE)
        is a masked array. ``errors=True`` adds ``<column>_stderr``."""
        import numpy  # a core dependency, imported on first use like the engine

        columns = self._unfetched(errors)
        names = [name for name, _ in columns]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ProgrammingError(f"fetchnumpy() needs distinct column names; rename {repeated} with AS in the SELECT list")
        return {name: _numpy_array(numpy, values) for name, values in columns}

    # -- notebooks ------------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        """Jupyter's rich display: values ± standard errors, then the cost and strategy in one line.
        Shows every row of the result (it does not fetch)."""
        return notebook.result_html(self._frame_source())

    def plot(self, level: float = 0.95, ax: Any = None) -> Any:
        """Released values with their ``level`` confidence intervals, one bar per row (labelled by its
        group keys) and one colour per released column; returns the matplotlib Axes. Shows every row."""
        return notebook.plot_result(self._frame_source(), level, ax)


def _pandas_series(pandas: ModuleType, values: list[object]) -> Any:
    """Integer keys with NULLs (rolled up by CUBE, a nullable column) stay integers: pandas' Int64."""
    present = [v for v in values if v is not None]
    if None in values and present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pandas.array(values, dtype="Int64")
    return values


def _numpy_array(numpy: ModuleType, values: list[object]) -> Any:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        kind: object = numpy.int64
    elif present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        kind = numpy.float64
    else:
        kind = object
    missing = [v is None for v in values]
    filled = [0 if v is None and kind is not object else v for v in values]
    array = numpy.array(filled, dtype=kind)
    return numpy.ma.masked_array(array, mask=missing) if any(missing) else array


def _arrow_array(pyarrow: ModuleType, values: list[object]) -> Any:
    if values and all(v is None or isinstance(v, float) for v in values):
        return pyarrow.array(values, type=pyarrow.float64())
    try:
        return pyarrow.array(values)
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError):  # keys of mixed types (categories [0, 'a'])
        return pyarrow.array([None if v is None else str(v) for v in values])
