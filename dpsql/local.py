"""Local differential privacy behind the same SQL: design a survey, randomize on clients, answer SQL.

In the local model there is no trusted curator. A *survey* is designed from a schema and a batch of
``SELECT … COUNT(*) … [WHERE …] GROUP BY …`` statements: the columns they read (GROUP BY, WHERE and
counted nullable columns, never the rest of the table) span the survey's domain, whose cells are the
user types of an ε-LDP randomizer optimized for the statements' workload (``planner.ldp.design``,
docs/math.md §8). Each privacy unit sends ONE report: its record's cell, randomized on its own device.
The reports then answer the same SQL through a DB-API-like cursor, with error bars::

    survey = dpsql.local.design(schema, ["SELECT sex, COUNT(*) FROM t GROUP BY sex",
                                         "SELECT age, COUNT(*) FROM t WHERE sex = 'F' GROUP BY age"], epsilon=1.0)
    shipped = survey.to_json()                          # mechanism + statements + domain, for clients
    report = dpsql.local.Survey.from_json(shipped).randomize({"sex": "F", "age": 34})    # on a client
    reports = survey.simulate("people.csv")             # or: every unit of a table (for evaluation)
    cursor = survey.connect(reports).cursor()
    cursor.execute("SELECT sex, COUNT(*) FROM t GROUP BY sex")
    cursor.fetchall(), cursor.errors, cursor.confidence_interval(0.95)

Rules:

* **One record per unit.** The schema must have ``max_rows_per_unit: 1``. Without a privacy unit
  every row is a unit; with one, :meth:`Survey.simulate` keeps ONE row per unit chosen uniformly at
  random (the central engine's bounding with a bound of 1). Reduce the table yourself first if
  another rule (the latest row, say) suits your survey better.
* **Every unit reports.** Whether a report arrives must not depend on the private value, so a value
  with no cell — NULL in a column not declared nullable, a value outside its column's declared domain,
  a missing column — is replaced on the device, before randomizing: by the column's NULL cell when the
  column is ``nullable: true``, else by a uniformly random cell of that column (:data:`FALLBACK_RULE`).
  The report then comes from the same randomizer as everyone's, so the survey stays ε-LDP; such units
  are counted in those cells (declare ``nullable: true`` to count them apart). :meth:`Survey.cell`
  is the strict mapping (a :class:`DataError` for such a value), for checking data before a survey.
* **No seeds on real data.** Randomization draws from the operating system's CSPRNG: a seed would
  let whoever knows it undo the randomization. :meth:`Survey.randomize` and :meth:`Survey.simulate`
  refuse ``rng=`` / ``seed=``; tests make them reproducible with :func:`dpsql.testing.seeded`.
* **Domain size.** The optimizer works on dense ``4n × n`` strategies; a survey domain of more than
  :data:`MAX_SURVEY_CELLS` cells is refused (mention fewer or coarser columns).
* **Answering.** Any statement whose columns the survey collects can be executed: it is answered
  without bias when its workload lies in the row space of the randomizer (always true for the
  optimized full-rank strategies), else refused with a :class:`ProgrammingError` asking to design for
  it. The designed statements get the accuracy the design optimized; others may be far noisier.
  Answering spends nothing: the users spent ε (the mechanism's) when they randomized.
* **Error bars.** The variance of an LDP estimate depends on the users' (unknown) values. The
  standard errors released are the worst case over them: the variance if every reporting unit had the
  type worst for that query (``planner.ldp.Aggregator.answers``), an upper bound, so the confidence
  intervals are conservative.

Result rows look like the central engine's for the same statement: same description, every cell of
the GROUP BY domain (zeros where the WHERE clause excludes a cell), ORDER BY / LIMIT, and GROUPING
SETS / CUBE / ROLLUP / UNION ALL with NULL keys and ``GROUPING()``.
"""

from __future__ import annotations

import bisect
import datetime
import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import duckdb
import numpy as np
from sqlglot import exp

from dpsql import errors, testing
from dpsql import progress as progress_bars
from dpsql.backends.factory import open_backend
from dpsql.connection import ResultCursor
from dpsql.errors import DataError, InterfaceError, NotSupportedError, ProgrammingError
from dpsql.result import ResultSet
from dpsql.schema import ColumnDomain, Schema, as_day
from dpsql.sql.bounded import salted_order_key
from dpsql.sql.literals import ColumnType, canonical_schema
from dpsql.sql import kinds
from dpsql.sql.parse import Query, predicate_columns
from dpsql.sql.statement import Statement, bind_statement, parse_text
from dpsql.workloads import CompiledBatch, compile_batch
from planner import Domain, Workload
from planner.ldp import (
    Aggregator,
    InvalidEpsilonError,
    Mechanism,
    MechanismFormatError,
    Report,
    WorkloadNotSupportedError,
)
from planner.ldp import design as design_mechanism

MAX_SURVEY_CELLS = 1024
"""Largest survey domain (cells = user types). The dense optimizer's cost grows as n³: n = 256 takes
≈ 34 s of one core (README, `benchmarks/ldp.py`), n = 1024 about half an hour."""

FALLBACK_RULE = (
    "a value with no cell (NULL in a column not declared nullable, a value outside the declared domain, a "
    "missing column) is reported as the column's NULL cell when it is nullable, else as a uniformly random "
    "cell of that column, drawn on the device before randomizing: every unit sends one report"
)
FORMAT_NAME = "dpsql-ldp-survey"
FORMAT_VERSION = 1
SIMULATION_TABLE = "__dpsql_survey_units"


# ---------------------------------------------------------------------------------------------------
# Statements → workloads over the survey's domain.
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CompiledSurveyStatement:
    """A statement compiled with its WHERE clause as masks (the local model cannot drop rows before
    counting: every unit reports its whole cell), as one workload over the columns it reads."""

    batch: CompiledBatch

    @property
    def columns(self) -> set[str]:
        return set(self.batch.columns)

    def matrix(self, domain: Domain) -> np.ndarray:
        """The dense workload over the survey's ``domain`` (rows in product order; no rows: empty)."""
        if self.batch.workload is None:
            return np.zeros((0, domain.size))
        return _on_survey_domain(self.batch.workload, domain)


def _compile(sql: object, parameters: Sequence[object] | None, schema: Schema) -> tuple[str, _CompiledSurveyStatement]:
    """The statement's table name and its compiled workload (columns resolved against ``schema``)."""
    parsed = parse_text(sql)
    if parsed.explain:
        raise NotSupportedError("EXPLAIN is not available on a local survey; Survey.describe() says how it answers")
    statement: Statement = bind_statement(parsed.trees[0], parameters, parsed.texts[0])
    for branch in statement.branches:
        _check_declared(branch.query, schema)
    batch = compile_batch([statement], [1.0], schema, schema.column_names, masks_only=True)
    return statement.table, _CompiledSurveyStatement(batch)


def _mentioned(query: Query) -> list[str]:
    names = list(query.group_sources())
    for item in query.select:
        kind = kinds.item_kind(item)
        column = item.column if kind is None else kind.counted(item)  # a group key's column, or what a COUNT names
        if column is not None:
            names.append(column)
    if query.where is not None:
        names.extend(predicate_columns(query.where))
    return names


def _check_declared(query: Query, schema: Schema) -> None:
    """Every column the statement reads must have a declared domain among ``schema``'s columns."""
    if query.derived:
        raise NotSupportedError(
            f"GROUP BY {query.derived[0].key[:60]!r}: a local survey answers group columns it randomized; group by the "
            "source column and combine its rows, or declare the derived values as a column of the survey"
        )
    refused = [r for i in query.select if (kind := kinds.item_kind(i)) is not None and (r := kind.local_refusal(i)) is not None]
    if refused:
        raise NotSupportedError(min(refused, key=lambda r: r[0])[1])  # the first of the lowest precedence
    known = {c.name.lower(): c for c in schema.columns}
    for name in _mentioned(query):
        column = known.get(name.lower())
        if column is None:
            raise ProgrammingError(
                f"unknown column {name!r}: the survey's columns are {list(schema.column_names)}; design a survey "
                "whose schema declares it and whose statements mention it"
            )
        if not column.is_known:
            raise NotSupportedError(
                f"column {column.name!r} has no declared domain: a local survey needs the categories, range or "
                "bins of every column it collects (users report a cell of the declared domain)"
            )


def _survey_domain(columns: Sequence[ColumnDomain]) -> Domain:
    return Domain({c.name: c.size for c in columns}, ordered=[c.name for c in columns if c.is_ordered])


def _on_survey_domain(workload: Workload, domain: Domain) -> np.ndarray:
    """``workload``'s dense matrix with one column per cell of ``domain`` ⊇ its own attributes.

    Built on the workload's own domain (so rows keep the order its result keys were computed in, which
    follows the statement's column order, not the survey's) and read at each survey cell's projection.
    """
    own = workload.domain
    coordinates = np.unravel_index(np.arange(domain.size), domain.sizes)
    if own.attributes:
        projected = np.ravel_multi_index(tuple(coordinates[domain.index(a)] for a in own.attributes), own.sizes)
    else:
        projected = np.zeros(domain.size, dtype=np.int64)
    return workload.dense()[:, projected]


def _schema_document(schema: Schema) -> dict[str, Any]:
    columns: dict[str, Any] = {}
    for column in schema.columns:
        spec: dict[str, Any] = {column.kind: list(column.values)}
        if column.nullable:
            spec["nullable"] = True
        columns[column.name] = spec
    return {"privacy_unit": schema.privacy_unit, "max_rows_per_unit": 1, "columns": columns}


# ---------------------------------------------------------------------------------------------------
# Records → cells (the client side).
# ---------------------------------------------------------------------------------------------------


def _is_null(value: object) -> bool:
    """None, or a float NaN (pandas' missing value)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _cell_of_value(column: ColumnDomain, value: object) -> int | None:
    """The cell of ``value`` in ``column``'s domain (NULL is the NULL cell of a nullable column); None
    if it has none."""
    if isinstance(value, np.generic):
        value = value.item()
    if _is_null(value):
        return column.null_cell
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if column.is_date_range:
        day = _day_of(value)
        low, high = column.values[0], column.values[1]
        low_day = low.date() if isinstance(low, datetime.datetime) else low
        high_day = high.date() if isinstance(high, datetime.datetime) else high
        return (day - low_day).days if day is not None and low_day <= day <= high_day else None  # type: ignore[operator]
    if column.kind == "categories":
        for index, category in enumerate(column.values):
            if isinstance(category, bool) == isinstance(value, bool) and category == value:
                return index
    elif is_number and math.isfinite(value):  # type: ignore[arg-type]
        if column.kind == "range":
            low, high = int(column.values[0]), int(column.values[1])
            if low <= value <= high and value == math.floor(value):  # type: ignore[operator,arg-type]
                return int(value) - low  # type: ignore[arg-type]
        else:
            edges = column.values
            if edges[0] <= value < edges[-1]:  # type: ignore[operator]
                return bisect.bisect_right(edges, value) - 1  # type: ignore[arg-type]
    return None


def _day_of(value: object) -> datetime.date | None:
    """The day a value of a range of days stands for: a date, a naive instant's day (as the central engine counts
    it), or an ISO date text (a record sent as JSON); None for anything else."""
    if isinstance(value, datetime.datetime):  # an instant with a time zone has no day without a zone: none here, as centrally
        return value.date() if value.utcoffset() is None else None
    return as_day(value)


def _strict_cell_of_value(column: ColumnDomain, value: object) -> int:
    cell = _cell_of_value(column, value)
    if cell is not None:
        return cell
    if _is_null(value.item() if isinstance(value, np.generic) else value):
        raise DataError(f"column {column.name!r} is not nullable, but the record's value is NULL ({value!r})")
    raise DataError(f"column {column.name!r}: the value {value!r} is outside its declared domain ({column.describe()})")


def _reported_cell_of_value(column: ColumnDomain, value: object, rng: random.Random) -> int:
    """The cell a device reports for ``value``: its own, else the fallback of :data:`FALLBACK_RULE`."""
    cell = _cell_of_value(column, value)
    if cell is not None:
        return cell
    return column.null_cell if column.nullable else rng.randrange(column.size)  # type: ignore[return-value]


def _python_values(column: np.ndarray) -> list[object]:
    """A result column as Python values, NULL (masked) as None."""
    missing = np.ma.getmaskarray(column)
    values = np.ma.getdata(column)
    return [None if absent else (value.item() if isinstance(value, np.generic) else value) for value, absent in zip(values, missing)]


def _refuse_seed(call: str, seed: object) -> None:
    if seed is not None:
        raise ProgrammingError(
            f"{call}: a local survey randomizes real records, and anyone who knows a seed can undo the "
            "randomization; it always draws from OS entropy (tests make it reproducible with dpsql.testing.seeded)"
        )


# ---------------------------------------------------------------------------------------------------
# The survey.
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Survey:
    """An ε-LDP survey: the randomizer, the statements it was designed for and the domain of its cells.

    ``schema`` holds only the columns the survey collects, in cell order: a record's cell is its
    C-order index over them (the first column varies slowest). Build one with :func:`design`, ship
    :meth:`to_json` to clients, rebuild with :meth:`from_json`.
    """

    table: str
    schema: Schema
    statements: tuple[str, ...]
    mechanism: Mechanism

    def __post_init__(self) -> None:
        if self.schema.max_rows_per_unit != 1 or not self.schema.columns:
            raise DataError("a survey's schema lists the collected columns and has max_rows_per_unit: 1")
        unknown = [c.name for c in self.schema.columns if not c.is_known]
        if unknown:
            raise DataError(f"a survey collects only columns with a declared domain; {unknown} have none")
        if self.mechanism.num_types != self.domain.size:
            raise DataError(
                f"the mechanism covers {self.mechanism.num_types} user types but the survey's domain has "
                f"{self.domain.size} cells"
            )

    @property
    def epsilon(self) -> float:
        """What each reporting unit spends (ε-LDP), once."""
        return float(self.mechanism.epsilon)

    @cached_property
    def domain(self) -> Domain:
        return _survey_domain(self.schema.columns)

    @property
    def columns(self) -> tuple[str, ...]:
        return self.schema.column_names

    # -- workloads -------------------------------------------------------------------------------------
    def statement_matrix(self, sql: str, parameters: Sequence[object] | None = None) -> np.ndarray:
        """The dense workload (queries × cells of the survey's domain) of one statement, WHERE as masks."""
        return self._compile(sql, parameters).matrix(self.domain)

    @cached_property
    def workload_matrix(self) -> np.ndarray:
        """The designed workload: every statement's matrix, stacked in order."""
        return np.vstack([self.statement_matrix(sql) for sql in self.statements])

    @cached_property
    def _compiled(self) -> dict[str, _CompiledSurveyStatement]:
        """Statements without parameters compiled so far (compiling is pure: it depends on the SQL only)."""
        return {}

    def _compile(self, sql: object, parameters: Sequence[object] | None) -> _CompiledSurveyStatement:
        if parameters is None and isinstance(sql, str) and sql in self._compiled:
            return self._compiled[sql]
        table, compiled = _compile(sql, parameters, self.schema)
        if table.lower() != self.table.lower():
            raise ProgrammingError(f"FROM: this survey collects table {self.table!r}, not {table!r}")
        if parameters is None:
            self._compiled[sql] = compiled  # type: ignore[index]
        return compiled

    def describe(self) -> str:
        """The survey in words: table, privacy, domain, statements."""
        lines = [
            (
                f"local survey of table {self.table!r}: each unit sends one {self.epsilon:g}-LDP report "
                f"({type(self.mechanism).__name__}) about one record"
            ),
            f"domain: {self.domain.size} cells over {list(self.columns)}",
        ]
        lines += [f"  {c.name}: {c.describe()}" for c in self.schema.columns]
        lines += ["designed for:"] + [f"  {sql}" for sql in self.statements]
        return "\n".join(lines)

    # -- the client side -------------------------------------------------------------------------------
    def cell(self, record: Mapping[str, object]) -> int:
        """The cell (user type) of one record: a mapping from the survey's column names to values.
        Strict: a :class:`DataError` for a value with no cell (:meth:`randomize` reports a fallback)."""
        if not isinstance(record, Mapping):
            raise DataError(f"a record must be a mapping of column names to values, got {type(record).__name__}")
        index = 0
        for column in self.schema.columns:
            if column.name not in record:
                raise DataError(f"the record has no value for column {column.name!r}; the survey collects {list(self.columns)}")
            index = index * column.size + _strict_cell_of_value(column, record[column.name])
        return index

    def reported_cell(self, record: Mapping[str, object], rng: random.Random) -> int:
        """The cell a device randomizes for ``record``: its own, with :data:`FALLBACK_RULE` for values
        that have none (drawn from ``rng``). Never fails on a value: every unit reports."""
        if not isinstance(record, Mapping):
            raise DataError(f"a record must be a mapping of column names to values, got {type(record).__name__}")
        index = 0
        for column in self.schema.columns:
            index = index * column.size + _reported_cell_of_value(column, record.get(column.name), rng)
        return index

    def randomize(self, record: Mapping[str, object], rng: object = None) -> Report:
        """The record's ε-LDP report, from OS entropy. Only this leaves the device. A value with no
        cell is replaced first (:data:`FALLBACK_RULE`), so every unit sends a report."""
        _refuse_seed("randomize(record, rng=...)", rng)
        source = testing.python_random()
        return self.mechanism.randomize(self.reported_cell(record, source), source)

    def simulate(self, table: object, *, seed: object = None) -> list[Report]:
        """Every unit of ``table`` randomized through the survey (for evaluation), in random order.

        ``table``: a ``.csv``/``.tsv``/``.json``/``.parquet`` path, a pandas DataFrame, an Arrow table
        or a DuckDB relation. One record per unit (one random row per privacy unit when the schema has
        one; rows with a NULL unit belong to no unit and are dropped), reported as :meth:`randomize`
        would: every unit sends one report. Draws from OS entropy (no seed: see the module's rules).
        """
        _refuse_seed("simulate(table, seed=...)", seed)
        source = testing.python_random()
        cells = [self.reported_cell(record, source) for record in self._unit_records(table, salt=source.getrandbits(62))]
        source.shuffle(cells)  # the order of reports must not reveal the cells
        return [self.mechanism.randomize(cell, source) for cell in cells]

    def _unit_records(self, table: object, salt: int) -> list[dict[str, object]]:
        """One record per unit of ``table`` (a random row per privacy unit, ordered by a salted hash)."""
        if isinstance(table, duckdb.DuckDBPyRelation):
            table = table.to_arrow_table()
        backend = open_backend(None)
        try:
            backend.register(SIMULATION_TABLE, table)
            column_types = backend.describe(SIMULATION_TABLE)
            needed = list(self.columns) + ([self.schema.privacy_unit] if self.schema.privacy_unit else [])
            missing = [name for name in needed if name not in column_types]
            if missing:
                raise ProgrammingError(f"the table has no column(s) {missing}; its columns are {list(column_types)}")
            types = {name: ColumnType.of(type_name, backend.dialect) for name, type_name in column_types.items()}
            canonical_schema(self.schema, types, self.table, backend.run, backend.dialect)  # refuses domains the columns cannot hold
            result = backend.run(self._one_row_per_unit(salt).sql(dialect=backend.dialect))
        finally:
            backend.close()
        columns = [_python_values(result[self._alias(index)]) for index in range(len(self.columns))]
        return [dict(zip(self.columns, values)) for values in zip(*columns)] if columns else []

    @staticmethod
    def _alias(index: int) -> str:
        return f"c{index}"

    def _one_row_per_unit(self, salt: int) -> exp.Select:
        """``SELECT`` the survey's columns, one row per unit (rows with a NULL unit dropped)."""
        projections = [exp.alias_(exp.column(name, quoted=True), self._alias(index)) for index, name in enumerate(self.columns)]
        source = exp.Table(this=exp.to_identifier(SIMULATION_TABLE, quoted=True))
        if self.schema.privacy_unit is None:
            return exp.select(*projections).from_(source)
        unit = exp.column(self.schema.privacy_unit, quoted=True)
        order = salted_order_key([unit.copy(), *(exp.column(name, quoted=True) for name in self.columns)], salt)
        rank = exp.Window(this=exp.RowNumber(), partition_by=[unit.copy()], order=exp.Order(expressions=[exp.Ordered(this=order)]))
        ranked = exp.select(*projections, exp.alias_(rank, "row_in_unit")).from_(source).where(unit.copy().is_(exp.null()).not_())
        aliases = [exp.column(self._alias(index)) for index in range(len(self.columns))]
        return exp.select(*aliases).from_(ranked.subquery("ranked")).where(exp.column("row_in_unit").eq(1))

    # -- the server side -------------------------------------------------------------------------------
    def connect(self, reports: Iterable[Report]) -> LocalConnection:
        """A connection answering SQL from the collected ``reports`` (validated here)."""
        return LocalConnection(self, reports)

    def cursor(self, reports: Iterable[Report]) -> LocalCursor:
        """Shorthand for ``connect(reports).cursor()``."""
        return self.connect(reports).cursor()

    # -- shipping --------------------------------------------------------------------------------------
    def to_json(self) -> str:
        """The survey as JSON: table, domain (the schema of its columns), statements, mechanism."""
        return json.dumps(
            {
                "format": FORMAT_NAME,
                "version": FORMAT_VERSION,
                "table": self.table,
                "schema": _schema_document(self.schema),
                "statements": list(self.statements),
                "mechanism": json.loads(self.mechanism.to_json()),
            }
        )

    @staticmethod
    def from_json(text: str | bytes) -> Survey:
        """Parse and validate :meth:`to_json` output; a :class:`DataError` says what is wrong."""
        try:
            document = json.loads(text)
        except (json.JSONDecodeError, TypeError, UnicodeDecodeError) as error:
            raise DataError(f"the survey is not valid JSON: {error}") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
            raise DataError(f'not a survey: expected a JSON object with "format": "{FORMAT_NAME}"')
        if document.get("version") != FORMAT_VERSION:
            raise DataError(f"unsupported survey version {document.get('version')!r}; expected {FORMAT_VERSION}")
        table, statements = document.get("table"), document.get("statements")
        if not isinstance(table, str) or not table:
            raise DataError('"table" must be the name of the surveyed table')
        if not isinstance(statements, list) or not statements or not all(isinstance(s, str) for s in statements):
            raise DataError('"statements" must be a non-empty list of SQL strings')
        try:
            schema = Schema.from_dict(document.get("schema"))
            mechanism = Mechanism.from_json(json.dumps(document.get("mechanism")))
        except ProgrammingError as error:
            raise DataError(f"the survey's schema is invalid: {error}") from None
        except MechanismFormatError as error:
            raise DataError(f"the survey's mechanism is invalid: {error}") from None
        survey = Survey(table, schema, tuple(statements), mechanism)
        for sql in statements:
            try:
                survey._compile(sql, None)
            except errors.Error as error:
                raise DataError(f"the survey's statement {sql!r} does not compile over its domain: {error}") from None
        return survey


def design(
    schema: Schema | Mapping[str, object] | str | Path,
    statements: str | Sequence[str],
    epsilon: float,
    *,
    seed: int | None = None,
    progress: progress_bars.Progress = None,
    **optimize_options: Any,
) -> Survey:
    """An ε-LDP survey optimized for ``statements`` over one table described by ``schema``.

    ``statements``: SELECT … COUNT … GROUP BY statements (GROUPING SETS / CUBE / ROLLUP / UNION ALL
    allowed), all over one table; their columns span the survey's domain. ``optimize_options`` go to
    ``planner.ldp.optimize`` (``restarts``, ``iterations``, …); ``seed`` makes the optimization
    reproducible. ``progress``: a bar while optimizing (None: on a terminal or in a notebook, see
    :mod:`dpsql.progress`; True / False; or a callable receiving ``(done, total, objective)``).
    """
    parsed = Schema.load(schema)
    if parsed.max_rows_per_unit != 1:
        raise ProgrammingError(
            f"a local survey collects ONE record per privacy unit, but the schema allows {parsed.max_rows_per_unit} "
            "rows per unit: set max_rows_per_unit: 1 (simulate() then keeps one random row per unit) or reduce "
            "the table to one row per unit first"
        )
    texts = (statements,) if isinstance(statements, str) else tuple(statements)
    if not texts:
        raise ProgrammingError("design() needs at least one SQL statement")
    compiled = [_compile(sql, None, parsed) for sql in texts]
    tables = {table.lower(): table for table, _ in compiled}
    if len(tables) > 1:
        raise NotSupportedError(f"a survey reads one table; the statements use {sorted(tables.values())}")
    used = set().union(*(statement.columns for _, statement in compiled))
    columns = tuple(c for c in parsed.columns if c.name in used)
    domain = _survey_domain(columns)
    if domain.size > MAX_SURVEY_CELLS:
        sizes = ", ".join(f"{c.name}: {c.size}" for c in columns)
        raise NotSupportedError(
            f"the statements read {list(domain.attributes)}, whose joint domain has {domain.size} cells ({sizes}); "
            f"a local survey is limited to {MAX_SURVEY_CELLS} cells: mention fewer columns or declare coarser domains"
        )
    survey_schema = Schema(parsed.privacy_unit, 1, columns)
    workload = np.vstack([statement.matrix(domain) for _, statement in compiled])
    if workload.shape[0] == 0:
        raise ProgrammingError("every count of the statements is zero by construction (their WHERE selects nothing)")
    try:
        report = progress_bars.bar("designing the LDP randomizer", progress, unit="iteration")
        mechanism = design_mechanism(workload, epsilon, seed=seed, progress=report or False, **optimize_options)
    except (InvalidEpsilonError, WorkloadNotSupportedError) as error:
        raise ProgrammingError(str(error)) from None
    except (ValueError, TypeError) as error:
        raise ProgrammingError(f"cannot design the survey: {error}") from None
    return Survey(compiled[0][0], survey_schema, texts, mechanism)


# ---------------------------------------------------------------------------------------------------
# Answering SQL from reports.
# ---------------------------------------------------------------------------------------------------


class LocalConnection(errors.ExceptionsOnConnection):
    """Answers SQL from a survey's reports. Answering costs nothing: the units spent ε when they
    randomized. ``commit``/``rollback`` are no-ops (nothing is ever written)."""

    def __init__(self, survey: Survey, reports: Iterable[Report]) -> None:
        self.survey = survey
        self.reports = list(reports)
        try:
            Aggregator(survey.mechanism, np.ones((1, survey.domain.size))).add(self.reports)
        except MechanismFormatError as error:
            raise DataError(f"the reports do not come from this survey's mechanism: {error}") from None
        self._closed = False

    @property
    def num_reports(self) -> int:
        return len(self.reports)

    def cursor(self) -> LocalCursor:
        self._check_open()
        return LocalCursor(self)

    def close(self) -> None:
        self._closed = True

    def commit(self) -> None:
        self._check_open()

    def rollback(self) -> None:
        self._check_open()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Self:
        self._check_open()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("the connection is closed")

    def answer(self, sql: str, parameters: Sequence[object] | None = None) -> ResultSet:
        """One statement's rows with their (worst-case) standard errors."""
        self._check_open()
        compiled = self.survey._compile(sql, parameters)
        workload = compiled.batch.workload
        if workload is None:
            return compiled.batch.results([], [])[0]
        try:
            aggregator = Aggregator(self.survey.mechanism, compiled.matrix(self.survey.domain))
        except WorkloadNotSupportedError as error:
            raise ProgrammingError(
                f"the survey cannot answer this statement without bias ({error}); design a survey that includes it"
            ) from None
        aggregator.add(self.reports)
        answers = aggregator.answers()
        bounds = np.cumsum([0] + [p.rows for p in workload.products])
        values = [answers.estimates[a:b] for a, b in zip(bounds, bounds[1:])]
        variances = [answers.variances[a:b] for a, b in zip(bounds, bounds[1:])]
        return compiled.batch.results(values, variances)[0]

    def _explained(self, result: ResultSet) -> ResultSet:
        return result.explained(self.survey.describe() + f"\nanswered from {self.num_reports} report(s)")


class LocalCursor(ResultCursor):
    """A PEP 249 cursor over a survey's reports: ``execute`` answers one statement; ``description``,
    ``fetch*``, ``rowcount``, ``errors`` and ``confidence_interval`` behave as on the central engine."""

    def __init__(self, connection: LocalConnection) -> None:
        super().__init__()
        self.connection = connection

    def _check_open(self) -> None:
        super()._check_open()
        self.connection._check_open()

    def execute(
        self, operation: str, parameters: Sequence[object] | None = None, *, epsilon: float | None = None, rho: float | None = None
    ) -> LocalCursor:
        """Answer one statement from the reports (``epsilon``/``rho`` are refused: answering is free)."""
        self._check_open()
        if epsilon is not None or rho is not None:
            raise ProgrammingError(
                f"answering from LDP reports costs nothing: the units spent ε = {self.connection.survey.epsilon:g} "
                "when they randomized; drop epsilon=/rho="
            )
        self._released(None)
        self._released(self.connection._explained(self.connection.answer(operation, parameters)))
        return self

    def executemany(self, operation: str, seq_of_parameters: Sequence[Sequence[object]]) -> LocalCursor:  # type: ignore[override]
        """Answer the statement once per parameter set; the rows of all runs are concatenated."""
        self._check_open()
        self._released(None)
        if isinstance(seq_of_parameters, (str, bytes)) or not isinstance(seq_of_parameters, Sequence):
            raise ProgrammingError("executemany() needs a sequence of parameter sequences, one per run")
        results = [self.connection.answer(operation, parameters) for parameters in seq_of_parameters]
        if results:
            rows = [row for result in results for row in result.rows]
            errs = [error for result in results for error in result.errors]
            self._released(self.connection._explained(ResultSet(results[0].description, rows, errs)))
        return self
