"""Several statements (and the grouping sets of each) planned, measured and charged as ONE workload.

``connection.workload([sql1, sql2, …], epsilon=1.0)`` and ``cursor.execute`` of a statement with
GROUPING SETS / CUBE / ROLLUP / UNION ALL come here. Every statement is split into grouping-set
branches (``dpsql.sql.grouping``), each branch is parsed and compiled as a plain statement, and all
their products — scaled by the statement's weight — form one ``planner.Workload`` over the union of
the columns they read. Products already in the row space of the connection's kept measurements are
answered from them (``dpsql.reuse``) at no cost; the rest is planned once, its marginals are computed
by ONE bounded aggregation statement (GROUPING SETS over the bounded rows), the budget is charged once,
and the new measurement joins the kept ones. Every released value carries its standard error.

>>> # results = connection.workload(["SELECT sex, COUNT(*) FROM adult GROUP BY sex",
>>> #                                "SELECT COUNT(*) FROM adult"], epsilon=1.0)
>>> # results[0].rows, results[0].errors, results[0].confidence_interval(0.95)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

import planner
from dpsql import explain, keys, nonnegative, testing
from dpsql.accountant import Cost
from dpsql.errors import InternalError, NotSupportedError, ProgrammingError
from dpsql.frames import FrameSource, ResultFrames
from dpsql.result import Result, build_result
from dpsql.schema import ColumnDomain
from dpsql.sql.bounded import BoundedAggregation
from dpsql.sql.compile import CellFilter, CompiledQuery, compile_query, statement_counts
from dpsql.sql.grouping import Branch, Constant, SplitStatement, check_parameter_count, is_extended, split_statement
from dpsql.sql.parse import parse
from dpsql.types import NUMBER
from planner import Domain, Product, Workload
from planner.strategies.base import Answers

if TYPE_CHECKING:
    from dpsql.connection import Connection, Table

Row = tuple[object, ...]


# ---------------------------------------------------------------------------------------------------
# Released result sets with error bars.
# ---------------------------------------------------------------------------------------------------


def confidence_intervals(rows: Sequence[Row], errors: Sequence[Row], level: float) -> list[tuple[tuple[float, float] | None, ...]]:
    """Per row and column, ``(low, high)`` = value ± z·stderr at two-sided ``level`` (normal
    approximation of the released noise), or None where a column carries no error (group keys,
    GROUPING(), NULL). Post-processing: free of privacy cost."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ProgrammingError(f"the confidence level must lie strictly between 0 and 1, got {level!r}")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    return [
        tuple(None if e is None or v is None else (float(v) - z * float(e), float(v) + z * float(e)) for v, e in zip(row, err))  # type: ignore[arg-type]
        for row, err in zip(rows, errors)
    ]


@dataclass(frozen=True)
class ResultSet(ResultFrames):
    """One statement's released rows, their standard errors (aligned, None in key columns) and the
    PEP 249 description; ``note``: what ``non_negative=True`` did to the batch (None when not asked)."""

    description: tuple[tuple[object, ...], ...]
    rows: list[Row]
    errors: list[Row]
    note: str | None = None

    def fetchall(self) -> list[Row]:
        return list(self.rows)

    def confidence_interval(self, level: float = 0.95) -> list[tuple[tuple[float, float] | None, ...]]:
        return confidence_intervals(self.rows, self.errors, level)

    def _frame_source(self) -> FrameSource:
        """Every row with its errors (:mod:`dpsql.frames`: ``df()``, ``arrow()``, ``pl()``, ``plot()``)."""
        return FrameSource(self.description, self.rows, self.errors, self.note)


# ---------------------------------------------------------------------------------------------------
# Preparing: split, parse, compile, merge, check coverage, plan.
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledBranch:
    branch: Branch
    compiled: CompiledQuery
    first_product: int  # index of its first product in the batch workload (unused when it has none)


@dataclass(frozen=True)
class CompiledStatement:
    sql: str
    split: SplitStatement
    branches: tuple[CompiledBranch, ...]
    weight: float


@dataclass(frozen=True)
class PreparedBatch:
    """A compiled, planned, priced batch that has not read any data yet."""

    statements: tuple[CompiledStatement, ...]
    table: Table
    workload: Workload | None  # every product of every branch (None: every count is zero by construction)
    measured: tuple[int, ...]  # products that must be measured (not in the row space of kept measurements)
    plan: planner.Plan | None  # the plan for the measured products (None when there are none)
    cost: Cost  # what running it charges when ``plan`` is not None (else nothing)
    row_filters: tuple[CellFilter, ...] = ()  # a WHERE shared by every branch, applied before bounding

    @property
    def charges(self) -> bool:
        return self.plan is not None

    @property
    def text(self) -> str:
        return "; ".join(s.sql for s in self.statements)

    @property
    def columns(self) -> dict[str, ColumnDomain]:
        """The columns whose domain tests decide the counted rows (``Table.counted_columns``)."""
        return self.table.counted_columns(_mentioned(b.compiled for s in self.statements for b in s.branches))


def _mentioned(compiled: Iterable[CompiledQuery]) -> dict[str, ColumnDomain]:
    columns: dict[str, ColumnDomain] = {}
    for query in compiled:
        for name, column in query.columns.items():
            columns.setdefault(name, column)
    return columns


def _weights(weights: Sequence[float] | None, count: int) -> list[float]:
    if weights is None:
        return [1.0] * count
    if isinstance(weights, (str, bytes)) or len(weights) != count:
        raise ProgrammingError(f"weights= needs one positive number per statement ({count}), got {weights!r}")
    checked = []
    for weight in weights:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not (math.isfinite(weight) and weight > 0):
            raise ProgrammingError(f"every statement weight must be a positive finite number, got {weight!r}")
        checked.append(float(weight))
    return checked


def _parameter_sets(parameters: Sequence[Sequence[object] | None] | None, count: int) -> list[Sequence[object] | None]:
    if parameters is None:
        return [None] * count
    if isinstance(parameters, (str, bytes)) or len(parameters) != count:
        raise ProgrammingError(f"parameters= needs one parameter sequence (or None) per statement ({count})")
    return list(parameters)


def prepare(
    connection: Connection,
    statements: Sequence[str],
    *,
    parameters: Sequence[Sequence[object] | None] | None = None,
    weights: Sequence[float] | None = None,
    epsilon: float | None = None,
    rho: float | None = None,
) -> PreparedBatch:
    """Compile, merge and plan a batch of statements over one table (no data read, nothing charged)."""
    connection._check_open()
    if isinstance(statements, str) or not isinstance(statements, Sequence) or not statements:
        raise ProgrammingError("a workload needs a non-empty list of SQL statements")
    cost = connection._cost(epsilon, rho)
    weight_list = _weights(weights, len(statements))
    table: Table | None = None
    compiled_statements = []
    products: list[Product] = []
    branch_parts: list[tuple[str, SplitStatement, list[tuple[Branch, CompiledQuery]], float]] = []
    for sql, params, weight in zip(statements, _parameter_sets(parameters, len(statements)), weight_list):
        if not isinstance(sql, str):
            raise ProgrammingError(f"every statement must be a SQL string, got {type(sql).__name__}")
        split = split_statement(sql)
        check_parameter_count(split, params)
        parts = []
        for branch in split.branches:
            query = parse(branch.sql, branch.bound(params))
            found = connection._tables.get(query.table.lower())
            if found is None:
                raise ProgrammingError(
                    f"FROM: unknown table {query.table!r}; use a registered table "
                    f"{sorted(t.name for t in connection._tables.values())}"
                )
            if table is not None and found is not table:
                raise NotSupportedError(
                    f"a batch reads one table (one pass over its rows); {table.name!r} and {found.name!r} are both used: "
                    "send one workload per table"
                )
            table = found
            schema = keys.schema_with_released_keys(connection, found)  # unknown columns with released keys
            parts.append((branch, compile_query(query, schema, tuple(found.column_types))))
        branch_parts.append((sql, split, parts, weight))
    assert table is not None
    branch_parts, row_filters = _shared_filters(branch_parts)
    domain = _union_domain([c for _, _, parts, _ in branch_parts for _, c in parts])
    for sql, split, parts, weight in branch_parts:
        branches = []
        for branch, compiled in parts:
            branches.append(CompiledBranch(branch, compiled, len(products)))
            if compiled.workload is not None:
                products.extend(Product(domain, p.factors, p.weight * weight) for p in compiled.workload.products)
        compiled_statements.append(CompiledStatement(sql, split, tuple(branches), weight))
    workload = Workload(domain, tuple(products)) if products else None
    measured: tuple[int, ...] = ()
    plan = None
    if workload is not None:
        reusable = connection.reuse and not row_filters  # filtered rows: marginals of a subset of the table
        mentioned = table.counted_columns(_mentioned(c for _, _, parts, _ in branch_parts for _, c in parts))
        covered = connection._measurements.covered(table.name, mentioned, workload) if reusable else (False,) * len(products)
        measured = tuple(i for i, c in enumerate(covered) if not c)
        if measured:
            plan = _plan(Workload(domain, tuple(products[i] for i in measured)), cost, table.schema.contributions)
    return PreparedBatch(tuple(compiled_statements), table, workload, measured, plan, cost, row_filters)


Parts = list[tuple[str, SplitStatement, list[tuple[Branch, CompiledQuery]], float]]


def _filter_key(cell_filter: CellFilter) -> tuple[object, ...]:
    return (cell_filter.scope, cell_filter.mask.shape, cell_filter.mask.tobytes())


def _shared_filters(branch_parts: Parts) -> tuple[Parts, tuple[CellFilter, ...]]:
    """When every branch has the same WHERE, it runs in SQL before bounding (as for one statement) and
    the branches measure their GROUP BY cells; otherwise every branch keeps its WHERE as masks in its
    workload (``statement_workload``) and the rows are bounded unfiltered."""
    compiled = [c for _, _, parts, _ in branch_parts for _, c in parts]
    keys = {tuple(sorted(_filter_key(f) for f in c.row_filters)) for c in compiled}
    if len(keys) == 1:
        return branch_parts, compiled[0].row_filters
    masked = [
        (sql, split, [(b, _with_masks(c)) for b, c in parts], weight) for sql, split, parts, weight in branch_parts
    ]
    return masked, ()


def _with_masks(compiled: CompiledQuery) -> CompiledQuery:
    if not compiled.row_filters:
        return compiled
    return dataclasses.replace(
        compiled,
        domain=compiled.statement_workload.domain if compiled.statement_workload is not None else compiled.domain,
        workload=compiled.statement_workload,
        counts=statement_counts(compiled),
        row_filters=(),
    )


def _union_domain(compiled: list[CompiledQuery]) -> Domain:
    sizes: dict[str, int] = {}
    ordered: set[str] = set()
    for query in compiled:
        for attribute, size in zip(query.domain.attributes, query.domain.sizes):
            sizes.setdefault(attribute, size)
        ordered |= query.domain.ordered
    return Domain(sizes, ordered=ordered)


def _plan(workload: Workload, cost: Cost, contributions: int) -> planner.Plan:
    privacy = planner.Privacy.laplace(cost.epsilon) if cost.epsilon is not None else planner.Privacy.zcdp(cost.rho)
    try:
        return planner.plan(workload, privacy, contributions=contributions)
    except MemoryError as error:
        raise NotSupportedError(f"the workload is too large to plan: {error}") from error
    except (ValueError, TypeError) as error:
        raise ProgrammingError(f"cannot plan the workload: {error}") from error


# ---------------------------------------------------------------------------------------------------
# Running: one aggregation, one measurement, one charge; then answers and rows.
# ---------------------------------------------------------------------------------------------------


def run(connection: Connection, prepared: PreparedBatch, non_negative: bool = False) -> list[ResultSet]:
    """Release the batch: one result set per statement, in order; with ``non_negative`` the answers
    are post-processed into those of non-negative counts (:mod:`dpsql.nonnegative`)."""
    connection._check_open()
    values: list[np.ndarray] = []
    variances: list[np.ndarray] = []
    note = None
    if prepared.workload is not None:
        answers, note = _release(connection, prepared, non_negative)
        values, variances = (_in_statement_order(prepared, list(a)) for a in (answers.values, answers.variances))
    return [dataclasses.replace(_statement_result(s, values, variances), note=note) for s in prepared.statements]


def _in_statement_order(prepared: PreparedBatch, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Per-product arrays of the merged workload, with each product's rows put back in the order of
    the statement it came from. The merged domain may order attributes differently from a statement
    (``GROUP BY race, sex`` after ``GROUP BY sex, race``), and a product's rows follow the Kronecker
    order of its factors, which the domain sorts."""
    assert prepared.workload is not None
    own = [
        product
        for statement in prepared.statements
        for branch in statement.branches
        if branch.compiled.workload is not None
        for product in branch.compiled.workload.products
    ]
    return [_rows_in_order_of(array, mine, merged) for array, mine, merged in zip(arrays, own, prepared.workload.products)]


def _rows_in_order_of(values: np.ndarray, own: Product, merged: Product) -> np.ndarray:
    order = [merged.factors.index(factor) for factor in own.factors]
    return np.asarray(values).reshape(merged.row_shape).transpose(order).reshape(-1)


def _release(connection: Connection, prepared: PreparedBatch, non_negative: bool) -> tuple[Answers, str | None]:
    """The batch's answers (GLS, or non-negative ones when asked) and the note saying how."""
    workload, table, store = prepared.workload, prepared.table, connection._measurements
    assert workload is not None
    fresh: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    kept_it = False
    if prepared.plan is not None:
        connection._ledger.check(prepared.cost)
        columns = prepared.columns
        aggregation = BoundedAggregation(
            table=table.relation,
            columns=columns,
            column_types={c: table.column_types[c] for c in columns},
            marginals=tuple(prepared.plan.required_marginals()),
            privacy_unit=table.schema.privacy_unit,
            max_rows_per_unit=table.schema.max_rows_per_unit,
            salt=testing.bounding_salt(),
            row_filters=prepared.row_filters,
        )
        result = connection._backend.run(aggregation.statement().sql(dialect=connection._backend.dialect))
        marginals = aggregation.marginal_arrays(result)
        try:
            measurement = prepared.plan.measure(marginals, rng=testing.random_source(), noise=testing.noise_enabled())
            answers = prepared.plan.answer(measurement)
        except (ValueError, TypeError, KeyError) as error:
            raise InternalError(f"measuring the workload failed: {error}") from error
        _check_spent(measurement.privacy, prepared.cost)
        connection._ledger.charge(prepared.cost, prepared.text)
        fresh = {index: (answers.values[i], answers.variances[i]) for i, index in enumerate(prepared.measured)}
        kept_it = not prepared.row_filters and store.record(table.name, prepared.columns, prepared.plan, measurement) and connection.reuse
    everything = tuple(range(len(workload.products)))
    from_store = everything if kept_it else tuple(i for i in everything if i not in fresh)
    found = {**fresh, **(store.answer(table.name, prepared.columns, workload, from_store) if from_store else {})}
    gls = Answers(tuple(found[i][0] for i in everything), tuple(found[i][1] for i in everything))
    if not non_negative:
        return gls, None
    if from_store == everything:
        finished = nonnegative.from_store(store, table.name, prepared.columns, workload, gls)
    elif not from_store:
        finished = nonnegative.from_measurement(prepared.plan, measurement, gls)  # type: ignore[arg-type]
    else:
        finished = nonnegative.unavailable(gls, "the batch combines kept measurements with a fresh one that cannot be kept")
    return finished.answers, finished.note


def _check_spent(privacy: planner.Privacy, requested: Cost) -> None:
    spent = privacy.epsilon**2 / 2 if privacy.is_laplace else privacy.rho
    if abs(spent - requested.rho) > 1e-9 * requested.rho:
        raise InternalError(f"the plan spent {privacy}, not the requested cost; refusing to release")


def _statement_result(statement: CompiledStatement, values: list[np.ndarray], variances: list[np.ndarray]) -> ResultSet:
    split = statement.split
    rows: list[Row] = []
    errors: list[Row] = []
    descriptions: list[Result] = []
    for part in statement.branches:
        count = 0 if part.compiled.workload is None else len(part.compiled.workload.products)
        start, stop = part.first_product, part.first_product + count
        branch_result = build_result(part.compiled, values[start:stop], variances[start:stop])
        descriptions.append(branch_result)
        layout = part.branch.layout
        for row, error in zip(branch_result.rows, branch_result.errors):
            rows.append(tuple(s.value if isinstance(s, Constant) else row[s] for s in layout))
            errors.append(tuple(None if isinstance(s, Constant) else error[s] for s in layout))
    rows, errors = _ordered(rows, errors, split)
    return ResultSet(_description(statement, descriptions), rows, errors)


def _description(statement: CompiledStatement, results: list[Result]) -> tuple[tuple[object, ...], ...]:
    described = []
    for column, name in enumerate(statement.split.names):
        slots = [(part.branch.layout[column], result) for part, result in zip(statement.branches, results)]
        own = [result.description[slot] for slot, result in slots if not isinstance(slot, Constant)]
        rolled_up = any(isinstance(slot, Constant) and slot.value is None for slot, _ in slots)
        if own:
            first = own[0]
            described.append((name, first[1], None, None, None, None, bool(first[6]) or rolled_up))
        else:  # GROUPING(): a constant integer in every branch
            described.append((name, NUMBER, None, None, None, None, False))
    return tuple(described)


def _ordered(rows: list[Row], errors: list[Row], split: SplitStatement) -> tuple[list[Row], list[Row]]:
    """ORDER BY (NULLs last in both directions, like ``dpsql.result``), then OFFSET / LIMIT."""
    order = list(range(len(rows)))
    for column, descending in reversed(split.order_by):
        if descending:
            order.sort(key=lambda r: (rows[r][column] is not None, rows[r][column]), reverse=True)
        else:
            order.sort(key=lambda r: (rows[r][column] is None, rows[r][column]))
    end = None if split.limit is None else split.offset + split.limit
    chosen = order[split.offset : end]
    return [rows[i] for i in chosen], [errors[i] for i in chosen]


def as_result(result_set: ResultSet) -> Result:
    """The cursor's result from a batch result set."""
    return Result(result_set.description, result_set.rows, result_set.errors)


# ---------------------------------------------------------------------------------------------------
# Entry points used by the connection and the cursor.
# ---------------------------------------------------------------------------------------------------


def is_batch_statement(sql: object) -> bool:
    """Whether ``cursor.execute`` hands the statement to this module (EXPLAIN, grouping sets, UNION ALL)."""
    return isinstance(sql, str) and (explain.explained_statements(sql) is not None or is_extended(sql))


def run_workload(
    connection: Connection,
    statements: Sequence[str],
    *,
    parameters: Sequence[Sequence[object] | None] | None = None,
    weights: Sequence[float] | None = None,
    epsilon: float | None = None,
    rho: float | None = None,
    explain_only: bool = False,
    non_negative: bool = False,
) -> list[ResultSet]:
    """``connection.workload``: one result set per statement, the budget charged once for all of them;
    with ``explain_only`` a single result set of EXPLAIN rows, nothing read or charged."""
    prepared = prepare(connection, statements, parameters=parameters, weights=weights, epsilon=epsilon, rho=rho)
    if explain_only:
        return [_explain_result(prepared, connection)]
    return run(connection, prepared, non_negative)


def execute_statement(
    connection: Connection,
    sql: str,
    parameters: Sequence[object] | None,
    epsilon: float | None,
    rho: float | None,
    non_negative: bool = False,
) -> tuple[Result, str]:
    """``cursor.execute`` of an EXPLAIN / grouping-set / UNION ALL statement: its result and explanation."""
    explained = explain.explained_statements(sql)
    if explained is not None:
        given = [parameters] if len(explained) == 1 else None
        if parameters and len(explained) > 1:
            raise ProgrammingError("EXPLAIN of several statements takes no parameters; inline the literals")
        prepared = prepare(connection, explained, parameters=given, epsilon=epsilon, rho=rho)
        text = explain.explain_text(prepared, connection._measurements)
        return as_result(_explain_result(prepared, connection)), text
    prepared = prepare(connection, [sql], parameters=[parameters], epsilon=epsilon, rho=rho)
    text = explain.explain_text(prepared, connection._measurements)
    released = run(connection, prepared, non_negative)[0]
    return as_result(released), text if released.note is None else f"{text}\n{released.note}"


def _explain_result(prepared: PreparedBatch, connection: Connection) -> ResultSet:
    rows = [r.as_tuple() for r in explain.explain_rows(prepared, connection._measurements)]
    return ResultSet(explain.DESCRIPTION, rows, [(None, None, None, None)] * len(rows))
