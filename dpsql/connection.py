"""PEP 249 Connection and Cursor: a thin facade over a :class:`~dpsql.session.Session` and the pipeline.

Every entry point — ``Cursor.execute`` (a statement, or ``EXPLAIN``), ``Cursor.executemany``,
``Connection.workload``, ``Connection.explain`` — builds a request and runs it through
:mod:`dpsql.pipeline`: prepare (every check, nothing read or charged), then release (the one charge
rule: charge durably, read once, measure, keep, build the rows).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from dpsql import errors, pipeline
from dpsql.accountant import Budget, Charge, Ledger, Remaining, Spent
from dpsql.backends.factory import open_backend
from dpsql.errors import InterfaceError, NotSupportedError, ProgrammingError
from dpsql.frames import FrameSource, ResultFrames
from dpsql.result import Interval, ResultSet
from dpsql.session import Session, Settings, Table
from dpsql.sql.settings import setting_command


class Connection(errors.ExceptionsOnConnection):
    """A connection to a privacy-protected database. Not safe to share between threads
    (``threadsafety = 1``); open one connection per thread on the same ledger instead.

    ``commit()`` and ``rollback()`` are no-ops: dpsql only reads, and every charge to the budget is
    committed durably by the statement that makes it (it can never be rolled back).
    """

    def __init__(
        self,
        database: object = ":memory:",
        *,
        backend: object = None,
        budget: Budget | Mapping[str, float] | float | None = None,
        ledger: str | Path | None = None,
        noise: str = "laplace",
        default_epsilon: float | None = None,
        reuse: bool = True,
        non_negative: bool = False,
        selection_delta: float | None = None,
        excluded_cells: str = "omit",
        stderr_columns: bool = False,
    ) -> None:
        settings = Settings(noise, default_epsilon, reuse, non_negative, selection_delta, excluded_cells, stderr_columns)
        if budget is not None:
            budget = Budget.of(budget)
        if ledger is None and budget is None:
            raise ProgrammingError("connect() needs a budget: connect(budget=dpsql.Budget(epsilon=1.0))")
        opened = Ledger(ledger, budget)
        try:
            self._session = Session(open_backend(database if backend is None else backend), opened, settings)
        except BaseException:
            opened.close()
            raise

    # -- settings -------------------------------------------------------------------------------------
    @property
    def noise(self) -> str:
        return self._session.settings.noise

    @property
    def default_epsilon(self) -> float | None:
        return self._session.settings.default_epsilon

    @property
    def reuse(self) -> bool:
        return self._session.settings.reuse

    @property
    def non_negative(self) -> bool:
        return self._session.settings.non_negative

    @property
    def selection_delta(self) -> float | None:
        """δ one key selection spends (None: a tenth of the budget's δ). Settable."""
        return self._session.settings.selection_delta

    @selection_delta.setter
    def selection_delta(self, value: float | None) -> None:
        self._session.settings = dataclasses.replace(self._session.settings, selection_delta=value)

    @property
    def excluded_cells(self) -> str:
        """``"omit"`` (default) or ``"zeros"``: whether GROUP BY cells the WHERE clause excludes are rows."""
        return self._session.settings.excluded_cells

    @property
    def stderr_columns(self) -> bool:
        """Whether every result carries ``<column>_stderr`` after each released column. Settable."""
        return self._session.settings.stderr_columns

    @stderr_columns.setter
    def stderr_columns(self, value: bool) -> None:
        self._session.settings = dataclasses.replace(self._session.settings, stderr_columns=value)

    # -- PEP 249 ------------------------------------------------------------------------------------
    def cursor(self) -> Cursor:
        self._session.check_open()
        return Cursor(self)

    def close(self) -> None:
        self._session.close()

    def commit(self) -> None:
        """No-op: dpsql never writes data, and budget charges commit themselves."""
        self._session.check_open()

    def rollback(self) -> None:
        """No-op: there is nothing to roll back (budget charges are final by design)."""
        self._session.check_open()

    def __enter__(self) -> Connection:
        self._session.check_open()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._session.closed

    def __repr__(self) -> str:
        if self.closed:
            return "<dpsql.Connection (closed)>"
        tables = ", ".join(self._session.tables) or "none registered"
        budget, left = self.budget, self._session.ledger.remaining()
        delta = f", delta={budget.delta:g}" if budget.delta else ""
        ledger = self._session.ledger.path or "in memory"
        return (f"<dpsql.Connection tables: {tables}; budget epsilon={budget.epsilon:g}{delta} ({left.epsilon:g} left); "
                f"ledger: {ledger}; {self.noise} noise>")

    # -- DuckDB-style shortcuts ---------------------------------------------------------------------
    def execute(self, operation: str, parameters: Sequence[object] | None = None, **cost: Any) -> Cursor:
        """``connection.cursor().execute(...)``, as DuckDB's ``connection.execute``: a new cursor holding
        the result (``.fetchall()``, ``.df()``, ``.errors``, …). Takes and costs what :meth:`Cursor.execute`
        does (``epsilon=``, ``rho=``, ``non_negative=``)."""
        return self.cursor().execute(operation, parameters, **cost)

    sql = execute
    """DuckDB's other name for it: ``connection.sql("SELECT …", epsilon=0.5).df()``."""

    # -- dpsql extensions ---------------------------------------------------------------------------
    def register(self, name: str, source: object = None, schema: object = None, *, public: bool = False) -> None:
        """Make a table queryable under ``name`` with its privacy ``schema``; ``name`` may be qualified
        (``"PUMS.PUMS"``, ``"public.census"``), and statements may name it with or without the default schema.

        ``public=True`` registers a *public* table instead (no schema: its rows are not protected): a file
        (.csv, .tsv, .json, .parquet), a pandas or polars frame or an Arrow table, copied into the DuckDB
        database that post-processes released rows, where statements may read and join it freely.

        ``source`` is a ``.csv``/``.tsv``/``.json``/``.parquet`` path, a pandas DataFrame, an Arrow
        table, or the name of an existing table/view of the backend's database (``None``: the table
        called ``name``, found in the engine's catalog). Only the table's column names and types are
        read here; every declared domain value is cast to its column's type in the engine and refused,
        naming the column, if it does not cast.
        """
        self._session.register(name, source, schema, public)

    def tables(self) -> dict[str, Table]:
        """The registered tables by name, each with its privacy schema and column types: public metadata
        only (what ``register`` read from the catalog), no data."""
        self._session.check_open()
        return {table.name: table for table in self._session.tables.values()}

    def budget_remaining(self) -> Remaining:
        """What is left of the budget (a float ε that also has ``.epsilon``, ``.delta``, ``.rho``).
        Read from the ledger, so it survives restarts when the ledger is a file."""
        self._session.check_open()
        return self._session.ledger.remaining()

    def budget_history(self) -> list[Charge]:
        """Every charge so far, oldest first (time, statement text, mechanism, ε, ρ, δ): for a budget plot
        (``dpsql.notebook.plot_budget``). Read from the ledger."""
        self._session.check_open()
        return self._session.ledger.history()

    def budget_spent(self) -> Spent:
        self._session.check_open()
        return self._session.ledger.spent()

    @property
    def budget(self) -> Budget:
        return self._session.budget

    def explain(self, operation: str, parameters: Sequence[object] | None = None, *, epsilon: float | None = None, rho: float | None = None) -> str:
        """How a statement would be answered — the plan execution would run — without reading data or
        spending. Without a cost, the plan at ε = 1 (ρ = 1), errors in those units."""
        request = pipeline.execute_request(self._session, operation, parameters, epsilon, rho, self.non_negative)
        request = dataclasses.replace(request, explain=True)
        return pipeline.run(self._session, request)[0].explanation

    def workload(
        self,
        statements: Sequence[str],
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        weights: Sequence[float] | None = None,
        parameters: Sequence[Sequence[object] | None] | None = None,
        explain: bool = False,
        non_negative: bool | None = None,
    ) -> list[ResultSet]:
        """Plan, measure and charge several statements on one table together: one result set per
        statement (rows, ``errors``, ``confidence_interval(level)``, ``explanation``), the cost charged
        ONCE for the batch. ``weights`` (one per statement, default equal) trade accuracy between
        statements; ``explain=True`` returns the EXPLAIN rows instead, reading and charging nothing.
        ``non_negative`` (default: the connection's): answers of non-negative counts, free
        post-processing (:mod:`dpsql.nonnegative`)."""
        request = pipeline.batch_request(
            self._session, statements, parameters, weights, epsilon, rho, self._non_negative(non_negative), explain
        )
        results = pipeline.run(self._session, request)
        return [r.with_error_columns() for r in results] if self.stderr_columns else results

    def _non_negative(self, asked: bool | None) -> bool | None:
        """A statement's ``non_negative=`` choice, checked (None: not given; the pipeline then reads the
        statement's text, ``SET dpsql.non_negative`` and the connection's default)."""
        if asked is not None and not isinstance(asked, bool):
            raise ProgrammingError(f"non_negative must be True or False, got {asked!r}")
        return asked


class ResultCursor(ResultFrames):
    """The fetching half of a PEP 249 cursor over a released :class:`ResultSet`: ``description``,
    ``rowcount``, ``fetch*``, iteration, ``errors`` (standard error of every released value, aligned
    with the rows, None in group-key columns), ``confidence_interval``, ``explanation``, and DuckDB-style
    frames of the rows not fetched yet (:mod:`dpsql.frames`: ``df()``, ``arrow()``, ``pl()``)."""

    def __init__(self) -> None:
        self.arraysize = 1
        self._closed = False
        self._result: ResultSet | None = None
        self._position = 0

    def _is_closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._is_closed():
            raise InterfaceError("the cursor is closed")

    def _released(self, result: ResultSet | None) -> None:
        self._result, self._position = result, 0

    def _check_result(self) -> ResultSet:
        self._check_open()
        if self._result is None:
            raise InterfaceError("no result set: call execute() with a SELECT first")
        return self._result

    @property
    def description(self) -> tuple[tuple[object, ...], ...] | None:
        """PEP 249: None when no statement ran or the last one returns no rows (``SET dpsql.epsilon = …``)."""
        return None if self._result is None or not self._result.description else self._result.description

    @property
    def rowcount(self) -> int:
        return -1 if self._result is None else len(self._result.rows)

    @property
    def lastrowid(self) -> None:
        return None

    @property
    def errors(self) -> list[tuple[object, ...]]:
        """Standard errors, one tuple per result row (all rows, independent of fetching)."""
        return list(self._check_result().errors)

    @property
    def explanation(self) -> str:
        """How the last statement was answered: domains, bounding, the plan, what was charged and kept."""
        return self._check_result().explanation

    def confidence_interval(self, level: float = 0.95) -> list[tuple[Interval | None, ...]]:
        """Per row and column, ``(low, high)`` at two-sided ``level`` from the standard errors (None in
        key columns). Free: post-processing of released values."""
        return self._check_result().confidence_interval(level)

    def _frame_source(self) -> FrameSource:
        return self._check_result()._frame_source()

    def callproc(self, procname: str, parameters: Sequence[object] = ()) -> None:
        raise NotSupportedError("stored procedures are not supported")

    def nextset(self) -> None:
        raise NotSupportedError("dpsql statements return a single result set")

    def setinputsizes(self, sizes: object) -> None:
        """Does nothing (allowed by PEP 249)."""

    def setoutputsize(self, size: int, column: int | None = None) -> None:
        """Does nothing (allowed by PEP 249)."""

    def fetchone(self) -> tuple[object, ...] | None:
        rows = self._take(1)
        return rows[0] if rows else None

    def fetchmany(self, size: int | None = None) -> list[tuple[object, ...]]:
        count = self.arraysize if size is None else size
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ProgrammingError(f"fetchmany size must be a non-negative integer, got {count!r}")
        return self._take(count)

    def fetchall(self) -> list[tuple[object, ...]]:
        return self._take(math.inf)

    def _take(self, count: float) -> list[tuple[object, ...]]:
        rows = self._check_result().rows
        end = len(rows) if count == math.inf else min(len(rows), self._position + int(count))
        taken = rows[self._position : end]
        self._position = end
        return taken

    def __iter__(self) -> Iterator[tuple[object, ...]]:
        return self

    def __next__(self) -> tuple[object, ...]:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def close(self) -> None:
        self._closed = True
        self._result = None

    def __repr__(self) -> str:
        name = f"dpsql.{type(self).__name__}"
        if self._is_closed():
            return f"<{name} (closed)>"
        if self._result is None:
            return f"<{name} (no result yet: call execute())>"
        return f"<{name} {self._result.summary()}, {self._position} fetched>"

    def __enter__(self) -> ResultCursor:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()


class Cursor(ResultCursor):
    """PEP 249 cursor of a :class:`Connection`."""

    def __init__(self, connection: Connection) -> None:
        super().__init__()
        self.connection = connection

    def _is_closed(self) -> bool:
        return self._closed or self.connection.closed

    def _check_open(self) -> None:
        super()._check_open()
        self.connection._session.check_open()

    def _released(self, result: ResultSet | None) -> None:
        """The released result, with ``<column>_stderr`` columns when the connection asks for them."""
        if result is not None and self.connection.stderr_columns:
            result = result.with_error_columns()
        super()._released(result)

    def execute(
        self,
        operation: str,
        parameters: Sequence[object] | None = None,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        non_negative: bool | None = None,
        **unexpected: object,
    ) -> Cursor:
        """Run one statement at privacy cost ``epsilon`` (or ``rho`` with Gaussian noise); ``EXPLAIN …``
        returns the plan as rows, reading and charging nothing. ``non_negative`` (default: the
        connection's): release answers of non-negative counts, free post-processing of the same
        measurement (:mod:`dpsql.nonnegative`); standard errors stay GLS's."""
        _refuse_unexpected("execute", unexpected)
        self._check_open()
        self._released(None)
        session = self.connection._session
        command = setting_command(operation)
        if command is not None:  # SET / RESET / SHOW dpsql.*: the connection's default cost
            self._released(pipeline.setting_result(session, command))
            return self
        request = pipeline.execute_request(session, operation, parameters, epsilon, rho, self.connection._non_negative(non_negative))
        results = pipeline.run(session, request)
        self._released(results[0] if len(results) == 1 else _concatenated(results))
        return self

    def executemany(
        self,
        operation: str,
        seq_of_parameters: Iterable[Sequence[object]],
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        non_negative: bool | None = None,
        **unexpected: object,
    ) -> Cursor:
        """Run the statement once per parameter set — planned, read and charged as ONE batch costing the
        sum of the per-run costs (each run at ``epsilon``/``rho``); the rows of all runs are concatenated.
        ``seq_of_parameters`` may be any iterable (a list, a generator). Nothing is read or charged if the
        batch does not fit in the budget."""
        _refuse_unexpected("executemany", unexpected)
        self._check_open()
        self._released(None)
        session = self.connection._session
        request = pipeline.many_request(session, operation, seq_of_parameters, epsilon, rho, self.connection._non_negative(non_negative))
        self._released(_concatenated(pipeline.run(session, request)))
        return self


def _refuse_unexpected(method: str, unexpected: dict[str, object]) -> None:
    """A keyword ``execute`` does not take is a ProgrammingError that names the ones it does (a Python
    TypeError would escape the DB-API's exception classes)."""
    if unexpected:
        names = ", ".join(f"{name}=" for name in unexpected)
        hint = " (δ is set on the connection: dpsql.Budget(delta=…), connect(selection_delta=…))" if "delta" in unexpected else ""
        raise ProgrammingError(f"{method}() takes epsilon=, rho= and non_negative=, not {names}{hint}")


def _concatenated(results: list[ResultSet]) -> ResultSet:
    """One result set of several statements' rows (executemany: the same statement's runs)."""
    return ResultSet(
        results[0].description,
        [row for r in results for row in r.rows],
        [error for r in results for error in r.errors],
        results[-1].explained_by,
    )


def connect(
    database: object = ":memory:",
    *,
    backend: object = None,
    budget: Budget | Mapping[str, float] | float | None = None,
    ledger: str | Path | None = None,
    noise: str = "laplace",
    default_epsilon: float | None = None,
    reuse: bool = True,
    non_negative: bool = False,
    selection_delta: float | None = None,
    excluded_cells: str = "omit",
    stderr_columns: bool = False,
) -> Connection:
    """Open a connection.

    ``budget``: the total (ε, δ): a :class:`Budget`, ``{"epsilon": 1.0, "delta": 1e-6}`` or a number
    (ε, δ = 0) — optional when ``ledger`` names an existing ledger file, which
    stores its budget. ``ledger``: path of the SQLite budget ledger (None: in memory, lost at exit).
    ``noise``: ``"laplace"`` (pure ε-DP, discrete Laplace) or ``"gaussian"`` (zCDP, discrete
    Gaussian; statements cost ``rho=``, or ``epsilon=`` meaning ρ = ε²/2). ``database``: a DuckDB
    path or connection (default: a fresh in-memory database). ``backend``: where the data lives
    instead, one of ``"postgresql://user:password@host:port/database"``, a DB-API connection
    (psycopg), a ``pyspark`` SparkSession (see :func:`dpsql.backends.factory.open_backend`); the
    engine then runs the bounded aggregation and dpsql never moves the rows. ``default_epsilon``: the
    cost of a statement executed without ``epsilon=``/``rho=`` (default None: such statements are refused).
    ``reuse`` (default True): keep every measurement released on this connection and answer a statement
    from them, free, when they answer it at least as accurately as a fresh measurement at its cost would;
    otherwise measure what is missing (charged) and combine it with what is kept. Repeating a statement
    therefore returns the same values at no cost. ``reuse=False``: every statement is measured afresh.
    ``non_negative`` (default False): release answers of non-negative counts (NNLS, consistent across
    every query) instead of GLS ones, for statements that do not say ``non_negative=``; free post-
    processing, standard errors stay GLS's (see :mod:`dpsql.nonnegative`). ``selection_delta``: the δ
    one key selection (GROUP BY a column without declared domain) spends; default a tenth of the
    budget's δ. ``excluded_cells``: the GROUP BY cells a WHERE clause excludes (``WHERE state = 'CA' GROUP
    BY state``: every other state) are known to be empty from the statement alone, so by default
    (``"omit"``) they are not rows of the result; ``"zeros"`` keeps every cell of the declared domain,
    those as exact zeros (COUNT and SUM 0 with error 0, other aggregates NULL). ``stderr_columns``
    (default False): every result carries ``<column>_stderr`` right after each released column — for
    tools that show only rows and columns (jupysql, pandas.read_sql); ``cursor.errors`` holds them anyway.
    """
    return Connection(
        database, backend=backend, budget=budget, ledger=ledger, noise=noise, default_epsilon=default_epsilon, reuse=reuse,
        non_negative=non_negative, selection_delta=selection_delta, excluded_cells=excluded_cells, stderr_columns=stderr_columns,
    )
