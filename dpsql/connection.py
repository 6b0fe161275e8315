"""PEP 249 Connection and Cursor over a differentially private engine.

A statement goes through these steps, in this order:

1. parse and compile (no data read): errors in SQL, names or literals are raised here;
2. plan the measurement (``planner.plan``) for the statement's cost;
3. check the budget: a statement that would overspend raises :class:`BudgetExceededError` before
   any data is read;
4. run ONE bounded aggregation statement in the backend and measure the marginals with discrete
   noise, then reconstruct the answers and their variances (nothing has left the engine yet);
5. charge the ledger durably (an atomic check-and-insert, fsynced); only then
6. release the rows.

A failure in steps 1-5 charges nothing: the charge is the last thing that can fail.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import planner
from dpsql import batch, errors, keys, nonnegative, testing
from dpsql.accountant import Budget, Cost, Ledger, Remaining, Spent
from dpsql.backends.dialects import engine_name
from dpsql.backends.factory import open_backend
from dpsql.errors import (
    InterfaceError,
    InternalError,
    NotSupportedError,
    ProgrammingError,
)
from dpsql.frames import FrameSource, ResultFrames
from dpsql.result import Result, build_result
from dpsql.reuse import MeasurementStore
from dpsql.schema import OUT_OF_DOMAIN_RULE, ColumnDomain, Schema
from dpsql.sql.bounded import BoundedAggregation, check_column_types
from dpsql.sql.compile import CompiledQuery, compile_query
from dpsql.sql.parse import parse
from planner.strategies.base import Answers

NOISE_FAMILIES = ("laplace", "gaussian")
PLAN_CACHE_SIZE = 64  # plans kept per connection (least recently used evicted)


@dataclass(frozen=True)
class Table:
    """A registered table: its name in the backend, its schema and its column types."""

    name: str
    relation: str
    schema: Schema
    column_types: dict[str, str]

    def counted_columns(self, mentioned: Mapping[str, ColumnDomain]) -> dict[str, ColumnDomain]:
        """The columns whose domain test decides which rows a statement counts: every column the
        schema declares with a public domain, plus the statement's own (``mentioned``: a released key
        set of an unknown column applies only where a statement mentions that column). Every central
        statement therefore counts the same rows, whatever it mentions, so a kept measurement answers
        any later statement in its row space (``GROUP BY sex`` after ``CUBE (sex, race)``)."""
        declared = {c.name: c for c in self.schema.columns if c.is_known and c.name in self.column_types}
        return {**mentioned, **{name: c for name, c in declared.items() if name not in mentioned}}


@dataclass(frozen=True)
class _Prepared:
    """A compiled, planned, priced statement that has not read any data yet."""

    operation: str
    compiled: CompiledQuery
    table: Table
    plan: object | None  # planner Plan; None when every count is zero by construction
    cost: Cost


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
        budget: Budget | None = None,
        ledger: str | Path | None = None,
        noise: str = "laplace",
        default_epsilon: float | None = None,
        reuse: bool = True,
        non_negative: bool = False,
    ) -> None:
        if noise not in NOISE_FAMILIES:
            raise ProgrammingError(f"noise must be one of {NOISE_FAMILIES}, got {noise!r}")
        if budget is not None and not isinstance(budget, Budget):
            raise ProgrammingError("budget must be a dpsql.Budget(epsilon=..., delta=...)")
        if ledger is None and budget is None:
            raise ProgrammingError("connect() needs a budget: connect(budget=dpsql.Budget(epsilon=1.0))")
        self.noise = noise
        self.default_epsilon = None if default_epsilon is None else Cost.pure(default_epsilon).epsilon
        self.reuse = reuse  # answer statements in the row space of released measurements from them, free
        if not isinstance(non_negative, bool):
            raise ProgrammingError(f"non_negative must be True or False, got {non_negative!r}")
        self.non_negative = non_negative  # default of execute(..., non_negative=): see dpsql.nonnegative
        self._ledger = Ledger(ledger, budget)
        if noise == "gaussian" and self._ledger.budget.delta == 0:
            self._ledger.close()
            raise ProgrammingError("noise='gaussian' needs a budget with delta > 0, e.g. Budget(epsilon=1.0, delta=1e-6)")
        self._backend = open_backend(database if backend is None else backend)
        self._tables: dict[str, Table] = {}
        self._measurements = MeasurementStore()  # every released measurement, for free re-use (dpsql.reuse)
        self._plans: OrderedDict[tuple[object, ...], planner.Plan] = OrderedDict()
        self._released_keys = keys.ReleasedKeys()  # key sets of unknown GROUP BY columns, re-used for free
        self.selection_delta: float | None = None  # δ per partition selection (None: a share of the budget's δ)
        self._closed = False

    # -- PEP 249 ------------------------------------------------------------------------------------
    def cursor(self) -> Cursor:
        self._check_open()
        return Cursor(self)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._backend.close()
            self._ledger.close()

    def commit(self) -> None:
        """No-op: dpsql never writes data, and budget charges commit themselves."""
        self._check_open()

    def rollback(self) -> None:
        """No-op: there is nothing to roll back (budget charges are final by design)."""
        self._check_open()

    def __enter__(self) -> Connection:
        self._check_open()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- dpsql extensions ---------------------------------------------------------------------------
    def register(self, name: str, source: object = None, schema: Schema | dict | str | Path | None = None) -> None:
        """Make a table queryable under ``name`` with its privacy ``schema``.

        ``source`` is a ``.csv``/``.tsv``/``.json``/``.parquet`` path, a pandas DataFrame, an Arrow
        table, or the name of an existing table/view of the backend's database (``None``: the table
        called ``name``, found in the engine's catalog). Only the table's column names and types are
        read here.
        """
        self._check_open()
        if not isinstance(name, str) or not name.isidentifier():
            raise ProgrammingError(f"table name must be a plain identifier, got {name!r}")
        if schema is None:
            raise ProgrammingError(f"register({name!r}, ...) needs schema=: a dict, YAML or JSON (see dpsql.schema)")
        parsed = Schema.load(schema)
        relation = self._relation_for(name, source)
        column_types = self._backend.describe(relation)
        self._check_schema(name, parsed, column_types, engine_name(self._backend.dialect))
        self._tables[name.lower()] = Table(name, relation, parsed, column_types)
        self._measurements.forget(name)

    def _relation_for(self, name: str, source: object) -> str:
        if source is None:
            return name
        if isinstance(source, str) and not Path(source).suffix and self._backend.has_relation(source):
            return source
        relation = f"__dpsql_{name}"
        self._backend.register(relation, source)
        return relation

    @staticmethod
    def _check_schema(name: str, schema: Schema, column_types: dict[str, str], engine: str) -> None:
        missing = [c for c in schema.column_names if c not in column_types]
        if schema.privacy_unit is not None and schema.privacy_unit not in column_types:
            missing.insert(0, schema.privacy_unit)
        if missing:
            raise ProgrammingError(
                f"the schema of {name!r} names column(s) {missing} that the data does not have; "
                f"its columns in {engine} are {list(column_types)}"
            )
        problems = check_column_types({c.name: c for c in schema.columns}, column_types, name)
        if problems:
            raise ProgrammingError("; ".join(problems) + f" (column types as {engine} reports them)")

    def tables(self) -> dict[str, Table]:
        """The registered tables by name, each with its privacy schema and column types: public
        metadata only (what ``register`` read from the catalog), no data."""
        self._check_open()
        return {table.name: table for table in self._tables.values()}

    def budget_remaining(self) -> Remaining:
        """What is left of the budget (a float ε that also has ``.epsilon``, ``.delta``, ``.rho``).
        Read from the ledger, so it survives restarts when the ledger is a file."""
        self._check_open()
        return self._ledger.remaining()

    def budget_spent(self) -> Spent:
        self._check_open()
        return self._ledger.spent()

    @property
    def budget(self) -> Budget:
        return self._ledger.budget

    def explain(self, operation: str, parameters: Sequence[object] | None = None, *, epsilon: float | None = None, rho: float | None = None) -> str:
        """How a statement would be answered (domain, plan, expected error), without reading data or spending."""
        keyed = keys.explanation(self, operation, parameters, epsilon, rho)  # GROUP BY a column with no domain
        if keyed is not None:
            return keyed
        prepared = self._prepare(operation, parameters, epsilon, rho)
        return _explanation(prepared)

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
    ) -> list[batch.ResultSet]:
        """Plan, measure and charge several statements on one table together: one result set per
        statement (rows, ``errors``, ``confidence_interval(level)``), the cost charged ONCE for the batch.
        ``weights`` (one per statement, default equal) trade accuracy between statements;
        ``explain=True`` returns the EXPLAIN rows instead, reading and charging nothing.
        ``non_negative`` (default: the connection's): answers of non-negative counts, free post-processing
        (:mod:`dpsql.nonnegative`); each result set's ``note`` says what it changed."""
        return batch.run_workload(
            self, statements, parameters=parameters, weights=weights, epsilon=epsilon, rho=rho, explain_only=explain,
            non_negative=self._non_negative(non_negative),
        )

    # -- execution ------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("the connection is closed")

    def _non_negative(self, asked: bool | None) -> bool:
        """A statement's ``non_negative=`` choice, the connection's default when not given."""
        chosen = self.non_negative if asked is None else asked
        if not isinstance(chosen, bool):
            raise ProgrammingError(f"non_negative must be True or False, got {chosen!r}")
        return chosen

    def _cost(self, epsilon: float | None, rho: float | None) -> Cost:
        if epsilon is not None and rho is not None:
            raise ProgrammingError("give the statement's cost as epsilon= or rho=, not both")
        if rho is not None:
            if self.noise != "gaussian":
                raise ProgrammingError("rho= is for Gaussian noise: connect(..., noise='gaussian'); use epsilon= here")
            return Cost.zcdp(rho)
        if epsilon is None:
            epsilon = self.default_epsilon
        if epsilon is None:
            raise ProgrammingError(
                "the statement has no privacy cost: pass execute(sql, epsilon=...) or connect(..., default_epsilon=...)"
            )
        pure = Cost.pure(epsilon)
        # Gaussian mode: epsilon= buys the same zCDP cost as a pure epsilon statement, rho = epsilon^2 / 2
        return pure if self.noise == "laplace" else Cost.zcdp(pure.rho)

    def _prepare(self, operation: str, parameters: Sequence[object] | None, epsilon: float | None, rho: float | None) -> _Prepared:
        self._check_open()
        cost = self._cost(epsilon, rho)
        query = parse(operation, parameters)
        table = self._tables.get(query.table.lower())
        if table is None:
            raise ProgrammingError(
                f"FROM: unknown table {query.table!r}; use a registered table {sorted(t.name for t in self._tables.values())} "
                "or register one with connection.register(name, source, schema=...)"
            )
        compiled = compile_query(query, keys.schema_with_released_keys(self, table), tuple(table.column_types))
        self._ledger.check(cost)
        plan = None
        if compiled.workload is not None:
            privacy = planner.Privacy.laplace(cost.epsilon) if cost.epsilon is not None else planner.Privacy.zcdp(cost.rho)
            try:
                plan = self._plan_for(compiled.workload, privacy, compiled.contributions)
            except MemoryError as error:
                raise NotSupportedError(f"the statement's workload is too large to plan: {error}") from error
            except (ValueError, TypeError) as error:
                raise ProgrammingError(f"cannot plan the statement: {error}") from error
            except ArithmeticError as error:
                raise InternalError(f"planning the statement failed: {error!r}") from error
        return _Prepared(operation, compiled, table, plan, cost)

    def _plan_for(self, workload: planner.Workload, privacy: planner.Privacy, contributions: int) -> planner.Plan:
        """``planner.plan``, memoised: a plan depends only on public inputs, never on the data."""
        key = (workload, privacy, contributions)
        cached = self._plans.pop(key, None)
        if cached is None:
            cached = planner.plan(workload, privacy, contributions=contributions)
        self._plans[key] = cached
        while len(self._plans) > PLAN_CACHE_SIZE:
            self._plans.popitem(last=False)
        return cached

    def _aggregation(self, prepared: _Prepared) -> BoundedAggregation:
        compiled, table = prepared.compiled, prepared.table
        columns = table.counted_columns(compiled.columns)
        return BoundedAggregation(
            table=table.relation,
            columns=columns,
            column_types={c: table.column_types[c] for c in columns},
            marginals=tuple(prepared.plan.required_marginals()),  # type: ignore[union-attr]
            privacy_unit=table.schema.privacy_unit,
            max_rows_per_unit=table.schema.max_rows_per_unit,
            salt=testing.bounding_salt(),
            row_filters=compiled.row_filters,
        )

    def _run(self, prepared: _Prepared, non_negative: bool = False) -> tuple[Result, str | None]:
        """Steps 3-6 of the module docstring for one prepared statement. With ``non_negative`` the
        answers are post-processed (:mod:`dpsql.nonnegative`) and the note says how; else it is None."""
        compiled = prepared.compiled
        if prepared.plan is None:
            return build_result(compiled, (), ()), None
        table_name, columns, workload = prepared.table.name, prepared.table.counted_columns(compiled.columns), compiled.workload
        if self.reuse and not compiled.row_filters and all(self._measurements.covered(table_name, columns, workload)):  # type: ignore[arg-type]
            kept = self._measurements.answers(table_name, columns, workload)  # type: ignore[arg-type]
            return self._released(compiled, kept, self._nonnegative_from_store(prepared, kept) if non_negative else None)  # free
        self._ledger.check(prepared.cost)
        aggregation = self._aggregation(prepared)
        marginals = aggregation.marginal_arrays(self._backend.run(aggregation.statement().sql(dialect=self._backend.dialect)))
        try:
            measurement = prepared.plan.measure(marginals, rng=testing.random_source(), noise=testing.noise_enabled())  # type: ignore[union-attr]
            answers = prepared.plan.answer(measurement)  # type: ignore[union-attr]
        except (ValueError, TypeError, KeyError) as error:
            raise InternalError(f"measuring the statement failed: {error}") from error
        build_result(compiled, answers.values, answers.variances)  # fails, if it must, before the charge
        charged = _cost_of(measurement.privacy, prepared.cost)
        self._ledger.charge(charged, prepared.operation)
        # rows dropped by WHERE before bounding make the marginals those of a subset: not kept for re-use
        if not compiled.row_filters and self._measurements.record(table_name, columns, prepared.plan, measurement) and self.reuse:  # type: ignore[arg-type]
            kept = self._measurements.answers(table_name, columns, workload)  # type: ignore[arg-type]
            # combined with earlier releases
            return self._released(compiled, kept, self._nonnegative_from_store(prepared, kept) if non_negative else None)
        return self._released(compiled, answers, nonnegative.from_measurement(prepared.plan, measurement, answers) if non_negative else None)  # type: ignore[arg-type]

    def _nonnegative_from_store(self, prepared: _Prepared, gls: Answers) -> nonnegative.Finished:
        compiled = prepared.compiled
        columns = prepared.table.counted_columns(compiled.columns)
        return nonnegative.from_store(self._measurements, prepared.table.name, columns, compiled.workload, gls)  # type: ignore[arg-type]

    @staticmethod
    def _released(compiled: CompiledQuery, gls: Answers, finished: nonnegative.Finished | None) -> tuple[Result, str | None]:
        """Result rows of the GLS answers, or of the non-negative ones (``finished``) with their note."""
        if finished is None:
            return build_result(compiled, gls.values, gls.variances), None
        return build_result(compiled, finished.answers.values, finished.answers.variances), finished.note


def _cost_of(privacy: planner.Privacy, requested: Cost) -> Cost:
    """The ledger cost of what the planner reports it spent (never less than requested)."""
    if privacy.is_laplace:
        spent = Cost.pure(privacy.epsilon)
    else:
        spent = Cost.zcdp(privacy.rho)
    if spent.rho < requested.rho * (1 - 1e-9):
        raise InternalError(f"the plan spent {privacy}, less than the requested cost; refusing to release")
    return spent if spent.mechanism == requested.mechanism else requested


def _explanation(prepared: _Prepared) -> str:
    lines = [prepared.compiled.describe(), f"values outside the domain: {OUT_OF_DOMAIN_RULE}"]
    if prepared.table.schema.privacy_unit is not None:
        lines.append(
            f"contribution bounding: at most {prepared.table.schema.max_rows_per_unit} random row(s) per "
            f"{prepared.table.schema.privacy_unit!r}"
        )
    if prepared.plan is not None:
        plan = prepared.plan
        try:
            lines.append(plan.explain())  # type: ignore[attr-defined]
        except (ValueError, ArithmeticError) as error:  # the planner's report failed; its plan did not
            lines.append(
                f"strategy: {plan.strategy_name} under {plan.privacy}; expected total squared error "  # type: ignore[attr-defined]
                f"{plan.expected_error():.6g} (full plan report unavailable: {error})"  # type: ignore[attr-defined]
            )
    return "\n".join(lines)


class Cursor(ResultFrames):
    """PEP 249 cursor. After ``execute``, ``description``, ``rowcount`` and the rows are available;
    ``errors`` holds the standard error of every released value, aligned with the rows (None in
    group-key columns); ``explanation`` says how the statement was answered."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.arraysize = 1
        self._closed = False
        self._result: Result | None = None
        self._position = 0
        self._prepared: _Prepared | None = None
        self._batch_explanation: str | None = None
        self._note: str | None = None  # what non_negative=True did to the last statement

    # -- attributes -------------------------------------------------------------------------------------
    @property
    def description(self) -> tuple[tuple[object, ...], ...] | None:
        return None if self._result is None else self._result.description

    @property
    def rowcount(self) -> int:
        return -1 if self._result is None else len(self._result.rows)

    @property
    def errors(self) -> list[tuple[object, ...]]:
        """Standard errors, one tuple per result row (all rows, independent of fetching)."""
        self._check_result()
        return list(self._result.errors)  # type: ignore[union-attr]

    @property
    def lastrowid(self) -> None:
        return None

    @property
    def explanation(self) -> str:
        """How the last statement was answered: domains, the drop rule, bounding, the plan and, with
        ``non_negative=True``, what the non-negative fit changed (or why GLS answers were released)."""
        self._check_result()
        text = self._batch_explanation if self._batch_explanation is not None else _explanation(self._prepared)  # type: ignore[arg-type]
        return text if self._note is None else f"{text}\n{self._note}"

    def confidence_interval(self, level: float = 0.95) -> list[tuple[tuple[float, float] | None, ...]]:
        """Per row and column, ``(low, high)`` at two-sided ``level`` from the standard errors (None in
        key columns). Free: post-processing of released values."""
        self._check_result()
        return batch.confidence_intervals(self._result.rows, self._result.errors, level)  # type: ignore[union-attr]

    def _frame_source(self) -> FrameSource:
        """Every row of the last result with its errors and explanation (:mod:`dpsql.frames`: ``df()``, …)."""
        self._check_result()
        return FrameSource(self.description, self._result.rows, self._result.errors, self.explanation)  # type: ignore[arg-type, union-attr]

    # -- execution --------------------------------------------------------------------------------------
    def execute(
        self,
        operation: str,
        parameters: Sequence[object] | None = None,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        non_negative: bool | None = None,
    ) -> Cursor:
        """Run one statement at privacy cost ``epsilon`` (or ``rho`` with Gaussian noise).
        ``non_negative`` (default: the connection's): release answers of non-negative counts, free
        post-processing of the same measurement (:mod:`dpsql.nonnegative`); standard errors stay GLS's."""
        self._check_open()
        self._result, self._position, self._prepared, self._batch_explanation, self._note = None, 0, None, None, None
        wanted = self.connection._non_negative(non_negative)
        keyed = keys.execute(self.connection, operation, parameters, epsilon, rho)  # GROUP BY a column with no domain
        if keyed is not None:
            self._result, self._batch_explanation = keyed
            if wanted:
                self._note = "non-negative answers are unavailable when grouping by a column without a domain; released the GLS answers"
            return self
        if batch.is_batch_statement(operation):  # EXPLAIN, GROUPING SETS / CUBE / ROLLUP, UNION ALL
            self._result, self._batch_explanation = batch.execute_statement(self.connection, operation, parameters, epsilon, rho, wanted)
            return self
        prepared = self.connection._prepare(operation, parameters, epsilon, rho)
        self._result, self._note = self.connection._run(prepared, wanted)
        self._prepared = prepared
        return self

    def executemany(
        self,
        operation: str,
        seq_of_parameters: Sequence[Sequence[object]],
        *,
        epsilon: float | None = None,
        rho: float | None = None,
    ) -> Cursor:
        """Run the statement once per parameter set, each at the given cost; the rows of all runs are
        concatenated. Every run is compiled, planned and priced first, and the batch is refused whole
        (nothing read, nothing charged) if its total cost does not fit in the budget."""
        self._check_open()
        self._result, self._position, self._prepared, self._note = None, 0, None, None
        prepared = [self.connection._prepare(operation, p, epsilon, rho) for p in seq_of_parameters]
        if prepared:
            self.connection._ledger.check(Cost.combined([p.cost for p in prepared]))
        released = [self.connection._run(p, self.connection.non_negative) for p in prepared]
        results = [result for result, _ in released]
        self._note = released[-1][1] if released else None  # like the explanation: the last run's
        rows = [row for r in results for row in r.rows]
        errs = [e for r in results for e in r.errors]
        description = results[0].description if results else None
        self._result = Result(description, rows, errs) if results else None  # type: ignore[arg-type]
        self._prepared = prepared[-1] if prepared else None
        return self

    def callproc(self, procname: str, parameters: Sequence[object] = ()) -> None:
        raise NotSupportedError("stored procedures are not supported")

    def nextset(self) -> None:
        raise NotSupportedError("dpsql statements return a single result set")

    def setinputsizes(self, sizes: object) -> None:
        """Does nothing (allowed by PEP 249)."""

    def setoutputsize(self, size: int, column: int | None = None) -> None:
        """Does nothing (allowed by PEP 249)."""

    # -- fetching ---------------------------------------------------------------------------------------
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
        self._check_result()
        rows = self._result.rows  # type: ignore[union-attr]
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

    # -- lifecycle --------------------------------------------------------------------------------------
    def close(self) -> None:
        self._closed = True
        self._result = None

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("the cursor is closed")
        self.connection._check_open()

    def _check_result(self) -> None:
        self._check_open()
        if self._result is None:
            raise InterfaceError("no result set: call execute() with a SELECT first")


def connect(
    database: object = ":memory:",
    *,
    backend: object = None,
    budget: Budget | None = None,
    ledger: str | Path | None = None,
    noise: str = "laplace",
    default_epsilon: float | None = None,
    reuse: bool = True,
    non_negative: bool = False,
) -> Connection:
    """Open a connection.

    ``budget``: the total (ε, δ) — optional when ``ledger`` names an existing ledger file, which
    stores its budget. ``ledger``: path of the SQLite budget ledger (None: in memory, lost at exit).
    ``noise``: ``"laplace"`` (pure ε-DP, discrete Laplace) or ``"gaussian"`` (zCDP, discrete
    Gaussian; statements cost ``rho=``, or ``epsilon=`` meaning ρ = ε²/2). ``database``: a DuckDB
    path or connection (default: a fresh in-memory database). ``backend``: where the data lives
    instead, one of ``"postgresql://user:password@host:port/database"``, a DB-API connection
    (psycopg), a ``pyspark`` SparkSession (see :func:`dpsql.backends.factory.open_backend`); the
    engine then runs the bounded aggregation and dpsql never moves the rows. ``default_epsilon``: the cost of a
    statement executed without ``epsilon=``/``rho=`` (default None: such statements are refused).
    ``reuse`` (default True): answer a statement whose queries lie in the row space of measurements this
    connection has already released from those measurements by GLS, charging nothing (see
    :mod:`dpsql.reuse`); otherwise only the queries not covered are measured, and combined with what is
    kept. Repeating a statement therefore returns the same values at no cost. ``reuse=False`` opts out:
    every statement is measured afresh, with fresh noise and a fresh charge.
    ``non_negative`` (default False): release answers of non-negative counts (NNLS, consistent across
    every query) instead of GLS ones, for statements that do not say ``non_negative=``; free post-
    processing, standard errors stay GLS's (see :mod:`dpsql.nonnegative`).
    """
    return Connection(
        database, backend=backend, budget=budget, ledger=ledger, noise=noise, default_epsilon=default_epsilon, reuse=reuse,
        non_negative=non_negative,
    )
