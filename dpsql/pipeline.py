"""The one statement pipeline: every entry point runs :func:`prepare`, then :func:`release`.

``Cursor.execute`` (a plain statement is a batch of one; ``EXPLAIN …``), ``Cursor.executemany`` (the
parameter sets as one batch), ``Connection.workload`` (a batch), ``Connection.explain`` and the server
build a :class:`Request` and hand it to the same two stages.

**prepare** reads no data and charges nothing; every check that can fail runs here. It parses each text
once (``dpsql.sql.statement``), binds names and types against the registered table, gives every column
without a declared domain its domain — a key set released earlier, or, when the statement must select
its keys, a placeholder — compiles all statements into one workload (``dpsql.workloads``), and decides
what to measure: for known domains the plan (``planner.plan``) and which products kept measurements
already answer at least as accurately as a fresh measurement at the requested cost would
(``planner.store``); for a statement that selects keys, how it selects them (``dpsql.selection``: from the
measured counts themselves, or by a split of its budget), checked to be runnable for any data.

**release** follows one charge rule: a statement that reads nothing (every answer already kept, or zero
by construction) is free and never refused; otherwise the ledger is charged — durably, refusing an
overspend before anything is read — and only then is the backend asked for the private rows, ONCE.
From that moment the statement has been paid for, whatever happens; nothing after the read raises
because of the data: the engine's error text (which may quote row values) is withheld, selection,
planning for the released keys (with the summed identity strategy to fall back on, which can always be
built) and measuring cannot fail on any data, and a defect surfaces as :class:`InternalError` of a fixed
text. The measurement is kept (``planner.store``), released keys are cached, and the rows are built.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Hashable, Iterable, Sequence

import numpy as np

import planner
from dpsql import keys, nonnegative, progress, selection, testing
from dpsql.accountant import Cost, check_number
from dpsql.backends.dialects import engine_name
from dpsql.errors import Error, InternalError, NotSupportedError, OperationalError, ProgrammingError
from dpsql.explain import Explanation, Outcome, explain_result
from dpsql.request import Decision, Prepared, Request
from dpsql.result import ResultSet
from dpsql.schema import ColumnDomain
from dpsql.session import Session, Table
from dpsql.sql.bounded import BoundedAggregation, KeyedColumn, KeyHistogram
from dpsql.sql.compile import MAX_RELEASED_CELLS, too_many_cells
from dpsql.sql.parse import Count, predicate_columns
from dpsql.sql.statement import ParsedText, Statement, bind_statement, parse_text
from dpsql.workloads import CompiledBatch, compile_batch
from planner import Answers, Measurement, Workload, marginal_for

RELATIVE_TOLERANCE = 1e-9  # kept variances this close to a fresh plan's count as equally accurate
BOUND_TEXT_CACHE_SIZE = 256  # texts without parameters kept parsed and bound (process-wide)
MAX_READ_CELLS = 1 << 26  # cells of the marginals one statement or batch reads (≈ 0.5 GB per int64 copy)
BOUND_BATCH_CACHE_SIZE = 16  # batches of such texts kept parsed and bound (process-wide)


# ---------------------------------------------------------------------------------------------------
# Requests: what an entry point asks for.
# ---------------------------------------------------------------------------------------------------


def execute_request(
    session: Session, operation: object, parameters: Sequence[object] | None, epsilon: float | None, rho: float | None, non_negative: bool
) -> Request:
    """``cursor.execute(operation, parameters)``: one statement, or ``EXPLAIN`` of one or several."""
    if isinstance(operation, str) and (parameters is None or (isinstance(parameters, (list, tuple)) and not parameters)):
        explain, statements = _bound_text(operation)
    else:
        parsed = parse_text(operation)
        if parsed.explain and parameters and len(parsed.trees) > 1:
            raise ProgrammingError("EXPLAIN of several statements takes no parameters; inline the literals")
        explain, statements = parsed.explain, tuple(bind_statement(tree, parameters, text) for tree, text in zip(parsed.trees, parsed.texts))
    return Request(statements, (1.0,) * len(statements), session.cost(epsilon, rho), non_negative, explain)


@functools.lru_cache(maxsize=BOUND_TEXT_CACHE_SIZE)
def _bound_text(text: str) -> tuple[bool, tuple[Statement, ...]]:
    """A text without parameters, parsed and bound: a pure function of the text (binding copies the parsed
    trees and checks the statement's form only; names are resolved against tables in ``prepare``), so
    a text run again skips sqlglot. Texts that fail raise each time (exceptions are not cached)."""
    parsed = parse_text(text)
    return parsed.explain, tuple(bind_statement(tree, None, sql) for tree, sql in zip(parsed.trees, parsed.texts))


def many_request(
    session: Session, operation: object, seq_of_parameters: object, epsilon: float | None, rho: float | None, non_negative: bool
) -> Request:
    """``cursor.executemany``: the statement once per parameter set, planned, read and charged as ONE
    batch whose cost is the sum of the per-statement costs."""
    if isinstance(seq_of_parameters, (str, bytes)) or not isinstance(seq_of_parameters, Iterable):
        raise ProgrammingError("executemany() needs an iterable of parameter sequences, one per run")
    seq_of_parameters = tuple(seq_of_parameters)  # a generator is read once, here, before anything is charged
    if not seq_of_parameters:
        raise ProgrammingError("executemany() needs at least one parameter sequence")
    parsed = parse_text(operation)
    if parsed.explain:
        raise NotSupportedError("executemany() runs statements; EXPLAIN one with execute() or connection.explain()")
    statements = tuple(bind_statement(parsed.trees[0], p, parsed.texts[0]) for p in seq_of_parameters)  # type: ignore[arg-type]
    cost = session.cost(epsilon, rho)
    total = None if cost is None else Cost.combined([cost] * len(statements))
    return Request(statements, (1.0,) * len(statements), total, non_negative)


def batch_request(
    session: Session,
    statements: object,
    parameters: object,
    weights: object,
    epsilon: float | None,
    rho: float | None,
    non_negative: bool,
    explain: bool,
) -> Request:
    """``connection.workload([sql, …])``: several statements (each parsed once) planned as one."""
    if isinstance(statements, str) or not isinstance(statements, Sequence) or not statements:
        raise ProgrammingError("a workload needs a non-empty list of SQL statements")
    count = len(statements)
    if parameters is None:
        parameters = [None] * count
    if isinstance(parameters, (str, bytes)) or not isinstance(parameters, Sequence) or len(parameters) != count:
        raise ProgrammingError(f"parameters= needs one parameter sequence (or None) per statement ({count})")
    if all(isinstance(sql, str) for sql in statements) and all(p is None or (isinstance(p, (list, tuple)) and not p) for p in parameters):
        bound = _bound_batch(tuple(statements))  # type: ignore[arg-type]
    else:
        bound = tuple(_bound_member(parse_text(sql), params) for sql, params in zip(statements, parameters))
    return Request(bound, _weights(weights, count), session.cost(epsilon, rho), non_negative, explain)


@functools.lru_cache(maxsize=BOUND_BATCH_CACHE_SIZE)
def _bound_batch(texts: tuple[str, ...]) -> tuple[Statement, ...]:
    """A batch of texts without parameters, parsed and bound (as :func:`_bound_text`, for a whole batch:
    a repeated workload of hundreds of statements skips sqlglot)."""
    return tuple(_bound_member(parse_text(text), None) for text in texts)


def _bound_member(parsed: ParsedText, parameters: object) -> Statement:
    if parsed.explain:
        raise ProgrammingError("a workload's statements are SELECTs; pass explain=True to explain the batch")
    return bind_statement(parsed.trees[0], parameters, parsed.texts[0])  # type: ignore[arg-type]


def _weights(weights: object, count: int) -> tuple[float, ...]:
    if weights is None:
        return (1.0,) * count
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence) or len(weights) != count:
        raise ProgrammingError(f"weights= needs one positive number per statement ({count}), got {weights!r}")
    return tuple(check_number("every statement weight", w, 1e-100, 1e100, why="weights trade accuracy between statements") for w in weights)


# ---------------------------------------------------------------------------------------------------
# Prepare: everything that can fail, before any private row is read.
# ---------------------------------------------------------------------------------------------------


def prepare(session: Session, request: Request) -> Prepared:
    """Bind, compile, plan and price ``request`` (module doc). Reads nothing, charges nothing."""
    session.check_open()
    table = session.table(request.statements[0].table)
    for statement in request.statements[1:]:
        if session.table(statement.table) is not table:
            raise NotSupportedError(
                f"a batch reads one table (one pass over its rows); {table.name!r} and {statement.table!r} are both used: "
                "send one workload per table"
            )
    keyed, selecting = _keyed_column(session, table, request.statements)
    schema = table.schema
    cached = None
    if keyed is not None:
        cached = session.keys.get(table, keyed)
        domain = keys.placeholder_domain(keyed) if selecting else keys.keys_domain(keyed, cached)  # type: ignore[arg-type]
        schema = dataclasses.replace(schema, columns=tuple(c for c in schema.columns if c.name != keyed) + (domain,))
    inputs = (request.statements, request.weights, schema, tuple(table.column_types))
    batch = session.memoised("compiled", inputs, lambda: compile_batch(*inputs))
    if keyed is not None and batch.derived:
        raise NotSupportedError(
            f"GROUP BY {next(iter(batch.derived))[:60]!r}: a derived group column cannot be combined with the column "
            f"{keyed!r}, which has no declared domain; declare {keyed!r}'s domain, or group by the derived column in a "
            "statement of its own"
        )
    if batch.encoding is not None and keyed is not None:
        raise NotSupportedError(
            f"SUM/AVG/VARIANCE/STDDEV with column {keyed!r}, which has no declared domain, is not supported: declare its "
            "categories, range or bins, or aggregate in a statement that neither groups by it nor uses its released keys"
        )
    if batch.distinct is not None and keyed is not None:
        raise NotSupportedError(
            f"COUNT(DISTINCT {batch.distinct.unit}) with the column {keyed!r}, which has no declared domain, is not supported: "
            f"declare {keyed!r}'s categories, range or bins, or count distinct units in a statement that does not use it"
        )
    moments = () if batch.encoding is None else (batch.encoding,)  # kept measurements in these units only
    pairs = () if batch.distinct is None else (batch.distinct.key(),)  # ... and of these (unit, group) pairs only
    rows = (table.name.lower(), tuple((f.scope, f.mask.tobytes()) for f in batch.row_filters), *moments, *pairs)
    if request.cost is None and not request.explain:
        raise ProgrammingError(
            "the statement has no privacy cost: pass execute(sql, epsilon=...) or connect(..., default_epsilon=...)"
        )
    cost = request.cost if request.cost is not None else _unit_cost(session)
    nothing = Decision(None, (), (), None)
    if batch.workload is None:
        return Prepared(request, table, batch, rows, None, keyed, None, nothing, _free(cost))
    privacy = planner.Privacy.laplace(cost.epsilon) if cost.epsilon is not None else planner.Privacy.zcdp(cost.rho)
    if selecting:
        assert keyed is not None
        chosen = selection.design(session, table, batch, keyed, privacy)
        return Prepared(request, table, batch, rows, privacy, keyed, chosen, nothing, selection.cost(chosen))
    if keyed is not None and math.prod(s for a, s in zip(batch.workload.domain.attributes, batch.workload.domain.sizes) if a != keyed) > selection.MAX_KEYED_OTHER_CELLS:
        raise NotSupportedError(selection.too_many_cells(keyed))
    contributions = table.schema.contributions * batch.scale if batch.distinct is None else batch.distinct.contributions
    if batch.distinct is not None and not privacy.is_laplace:
        # a unit's pairs lie in distinct cells of the group marginal, the one marginal the summed identity
        # measures: L2 sensitivity √k (L1 is k whatever the strategy, so pure DP takes the planner's best)
        fresh = planner.identity_plan(batch.workload, privacy, contributions, distinct_cells=True)
    else:
        fresh = session.plan(batch.workload, privacy, contributions)
    _check_spent(fresh.privacy, privacy)
    decision = _decision(session, batch.workload, fresh, rows, privacy, contributions, request.cost is not None)
    if decision.plan is not None:
        _check_feasible(session, batch, decision.plan)
    spent = cost if decision.plan is not None else _free(cost)
    return Prepared(request, table, batch, rows, privacy, keyed, None, decision, spent, None if cached is None else len(cached))


def _check_feasible(session: Session, batch: CompiledBatch, plan: planner.Plan) -> None:
    """Refuse, before anything is charged, a statement whose read or release cannot be carried out on any
    data: more cells than memory allows (decided from the domains), or more grouping columns than the
    engine's ``GROUPING SETS`` take. Public facts only: the plan, the domains and the backend."""
    assert batch.workload is not None
    domain = batch.workload.domain
    read = batch.read_marginals(plan.required_marginals())
    read_cells = sum(math.prod(batch.columns[a].size if a in batch.columns else domain.size_of(a) for a in m) for m in read)
    released = sum(p.rows for p in batch.workload.products)
    for what, cells, limit in (("read", read_cells, MAX_READ_CELLS), ("release", released, MAX_RELEASED_CELLS)):
        if cells > limit:
            raise NotSupportedError(too_many_cells(what, cells, limit))
    grouped = {a for m in read if len(read) > 1 for a in m if a in batch.columns}
    limit = getattr(session.backend, "max_grouping_columns", None)
    if limit is not None and len(grouped) > limit:
        raise NotSupportedError(
            f"the batch groups by {len(grouped)} columns in one pass, and {engine_name(session.backend.dialect)} takes at "
            f"most {limit} in GROUPING SETS: split it into batches over at most {limit} columns each"
        )


def _unit_cost(session: Session) -> Cost:
    """EXPLAIN without a cost explains the plan at ε = 1 (ρ = 1 with Gaussian noise)."""
    return Cost.pure(1.0) if session.settings.noise == "laplace" else Cost.zcdp(1.0)


def _free(cost: Cost) -> Cost:
    return Cost(cost.mechanism, 0.0, 0.0 if cost.epsilon is not None else None)


def _keyed_column(session: Session, table: Table, statements: Sequence[Statement]) -> tuple[str | None, bool]:
    """The column without a declared domain the statements group by (or use with released keys), and
    whether its keys must be selected now. Refuses what selection cannot serve."""
    grouped: dict[str, None] = {}
    used: dict[str, None] = {}
    for statement in statements:
        for branch in statement.branches:
            query = branch.query
            for name in query.group_by:
                resolved = table.resolve(name)
                if resolved is not None and not table.schema.column(resolved).is_known:
                    grouped[resolved] = None
            mentioned = [i.column for i in query.select if isinstance(i, Count) and i.column is not None]
            mentioned += list(predicate_columns(query.where)) if query.where is not None else []
            for name in mentioned:
                resolved = table.resolve(name)
                if resolved is not None and not table.schema.column(resolved).is_known and session.keys.get(table, resolved) is not None:
                    used[resolved] = None
    candidates = list(dict.fromkeys([*grouped, *used]))
    if len(candidates) > 1:
        raise NotSupportedError(
            f"GROUP BY: columns {candidates} have no declared domain; one statement can select the keys of one such "
            "column: declare the domain (categories, range or bins) of the others, or select their keys in "
            "separate statements first"
        )
    if not candidates:
        return None, False
    column = candidates[0]
    if not table.column_types[column].can_hold_keys:
        raise NotSupportedError(
            f"GROUP BY: column {column!r} has type {table.column_types[column].name}; keys of a column with no declared "
            "domain must be strings, numbers, booleans, dates or timestamps: declare its domain, or group by another column"
        )
    selecting = session.keys.get(table, column) is None
    if selecting:
        for statement in statements:
            for branch in statement.branches:
                where = branch.query.where
                if where is not None and any(table.resolve(c) == column for c in predicate_columns(where)):
                    raise NotSupportedError(
                        f"WHERE: column {column!r} has no declared domain in the schema of {table.name!r}, and this statement "
                        "selects its keys; declare its categories, range or bins, or select its keys first with a GROUP BY "
                        "on it (a predicate on it cannot be compiled to a mask over a public domain)"
                    )
    return column, selecting


def _check_spent(spent: planner.Privacy, requested: planner.Privacy) -> None:
    if abs(spent.as_zcdp() - requested.as_zcdp()) > 1e-9 * requested.as_zcdp() or spent.family != requested.family:
        raise InternalError(f"the plan spends {spent}, not the requested {requested}; refusing to run it")


def _decision(
    session: Session, workload: Workload, fresh: planner.Plan, rows: Hashable, privacy: planner.Privacy, contributions: int, assess: bool
) -> Decision:
    """Answer from kept measurements the products they answer at least as accurately as ``fresh`` would;
    measure the others (all of them, when nothing kept is good enough) with a plan of their own."""
    everything = tuple(range(len(workload.products)))
    if not (session.settings.reuse and assess):
        return Decision(fresh, everything, (), fresh)
    covered = session.store.covered(rows, workload)
    candidates = tuple(i for i in everything if covered[i])
    answered = session.store.answer(rows, workload, candidates)
    fresh_variances = fresh.query_variances()
    kept = tuple(
        i for i in candidates
        if np.all(answered[i][1] <= fresh_variances[i] * (1 + RELATIVE_TOLERANCE) + 1e-12)
    )
    variances = {i: answered[i][1] for i in kept}
    count = session.store.measurement_count(rows)
    measured = tuple(i for i in everything if i not in kept)
    if not measured:
        return Decision(None, (), kept, fresh, variances, count)
    if not kept:
        return Decision(fresh, everything, (), fresh, {}, count)
    plan = session.plan(Workload(workload.domain, tuple(workload.products[i] for i in measured)), privacy, contributions)
    _check_spent(plan.privacy, privacy)
    return Decision(plan, measured, kept, fresh, variances, count)


# ---------------------------------------------------------------------------------------------------
# Release: charge, read once, measure, keep, build.
# ---------------------------------------------------------------------------------------------------


def run(session: Session, request: Request) -> list[ResultSet]:
    """Prepare and release a request: one result set per statement (EXPLAIN: one of plan rows)."""
    return release(session, prepare(session, request))


def release(session: Session, prepared: Prepared) -> list[ResultSet]:
    """Release a prepared request under the one charge rule (module doc)."""
    session.check_open()
    if prepared.request.explain:
        return [explain_result(prepared)]
    batch = prepared.batch
    if batch.workload is None:
        return _with_explanation(session, prepared, batch.results([], []), Outcome("zero"))
    if not prepared.reads:  # every answer is kept: free, never refused
        gls = _from_store(session, prepared, tuple(range(len(batch.workload.products))))
        answers, note = _finished(session, prepared, gls, None, None, from_store=True)
        return _with_explanation(session, prepared, batch.results(answers.values, answers.variances), Outcome("free", note=note))
    session.ledger.charge(prepared.cost, prepared.request.text)  # durable; refuses an overspend before the read
    aggregation = _aggregation(session, prepared)
    result = _read(session, prepared.table, aggregation)
    try:
        counts = _counted(prepared, aggregation, result)
        del result  # the engine's rows (every column of every grouping set): freed before the plan's arrays are made
        return _measured(session, prepared, aggregation, counts)
    except Error as error:
        raise InternalError(f"answering the statement failed after its rows were read ({type(error).__name__}); it was charged. "
                            "This is a dpsql defect: please report it") from None
    except Exception as error:  # noqa: BLE001 - nothing after the read may surface data-dependent detail
        raise InternalError(f"answering the statement failed after its rows were read ({type(error).__name__}); it was charged. "
                            "This is a dpsql defect: please report it") from None


def _read(session: Session, table: Table, aggregation: BoundedAggregation) -> dict[str, np.ndarray]:
    """The one read of private rows: the table's bounded rows are kept first if they are not yet
    (``dpsql.bounded_tables``), then the aggregation runs. The engine's message is withheld: it may
    quote row values."""
    sql = session.memoised("sql", aggregation, lambda: aggregation.statement().sql(dialect=session.backend.dialect, copy=False))

    def read() -> dict[str, np.ndarray]:
        if aggregation.bounded:  # it reads the kept bounded rows: computed by this read if not yet
            session.bounded.ensure(table)
        return session.backend.run(sql)

    try:
        return progress.watched(read, getattr(session.backend, "progress", None), "reading")
    except Exception as error:  # noqa: BLE001
        cause = error.__cause__ if isinstance(error, OperationalError) and error.__cause__ is not None else error
        raise OperationalError(
            f"the backend failed while reading the private rows ({type(cause).__name__}); the statement was charged. "
            "The engine's message is withheld because it may quote row values"
        ) from None


def _aggregation(session: Session, prepared: Prepared) -> BoundedAggregation:
    """The bounded aggregation release sends: the plan's marginals, or — when a column's cells are decided
    by key bounding — every (key, other cells) count."""
    table, batch = prepared.table, prepared.batch
    assert batch.workload is not None
    domain = batch.workload.domain
    mentioned = batch.columns
    columns: dict[str, ColumnDomain] = {**mentioned, **{n: c for n, c in table.declared_columns().items() if n not in mentioned}}
    if prepared.keyed is not None:
        keyed = KeyedColumn(
            prepared.keyed, table.schema.max_groups_per_unit, keys.KeyBounds.of(table.schema).max_rows_per_group,
            count_units=prepared.selection is not None,
        )
        marginals: tuple[tuple[str, ...], ...] = (domain.attributes,)
    else:
        keyed = None
        assert prepared.decision.plan is not None
        marginals = batch.read_marginals(prepared.decision.plan.required_marginals())
    attributes = [a for a in batch.read_attributes(domain.attributes) if a in columns]  # not an aggregated column's moment cells
    ordered = {name: columns[name] for name in (*attributes, *(c for c in columns if c not in attributes))}
    kept = session.bounded.relation(table)
    return BoundedAggregation(
        table=table.relation if kept is None else kept,
        columns=ordered,
        column_types={c: table.column_types[c] for c in ordered},
        marginals=marginals,
        privacy_unit=table.schema.privacy_unit,
        max_rows_per_unit=table.schema.max_rows_per_unit,
        salt=table.salt,
        row_columns=tuple(table.column_types),
        row_filters=batch.row_filters,
        keyed=keyed,
        value=batch.encoding,
        bounded=kept is not None,
        distinct=batch.distinct,
    )


def _counted(prepared: Prepared, aggregation: BoundedAggregation, result: dict[str, np.ndarray]) -> KeyHistogram | dict[tuple[str, ...], np.ndarray]:
    """What the read counted: per raw key when a column's cells come from key bounding, else the marginals."""
    if prepared.selection is not None or prepared.keyed is not None:
        return aggregation.key_histogram(result)
    return aggregation.marginal_arrays(result)


def _measured(
    session: Session, prepared: Prepared, aggregation: BoundedAggregation, counts: KeyHistogram | dict[tuple[str, ...], np.ndarray]
) -> list[ResultSet]:
    """Everything after the read: select (when asked), plan the counts of released keys, measure, keep, build."""
    batch, decision = prepared.batch, prepared.decision
    if prepared.selection is not None:
        assert isinstance(counts, KeyHistogram)
        outcome = selection.release(session, prepared, counts)
        if outcome.answers is None:
            return _with_explanation(session, prepared, _zero_results(outcome.batch), Outcome("measured", released=outcome.released))
        answers, note = _finished(session, prepared, outcome.answers, None, None, from_store=False, batch=outcome.batch)
        report = Outcome("measured", released=outcome.released, plan=outcome.plan, note=note)
        return _with_explanation(session, prepared, outcome.batch.results(answers.values, answers.variances), report)
    plan, measured, kept = decision.plan, decision.measured, decision.kept
    if prepared.keyed is not None:  # a released key set: the column's cells come from key bounding
        assert batch.workload is not None
        domain = next(c for s in batch.statements for b in s.branches for n, c in b.columns.items() if n == prepared.keyed)
        assert isinstance(counts, KeyHistogram)
        full = np.moveaxis(keys.table_over_keys(counts, domain), 0, batch.workload.domain.attributes.index(prepared.keyed))
        required = {m: marginal_for(batch.workload.domain, {batch.workload.domain.attributes: full}, m) for m in plan.required_marginals()}  # type: ignore[union-attr]
    else:
        assert isinstance(counts, dict)
        required = batch.folded(plan.required_marginals(), counts)  # type: ignore[union-attr]
    assert plan is not None and batch.workload is not None
    measurement = plan.measure(required, rng=testing.random_source(), noise=testing.noise_enabled())
    del required
    estimates = plan.kept_estimates(measurement) if session.settings.reuse else None
    earlier = session.store.measurement_count(prepared.rows)
    if estimates is not None:
        session.store.record(prepared.rows, estimates)
    covered = session.store.covered(prepared.rows, batch.workload) if estimates is not None else ()
    everything = range(len(batch.workload.products))
    from_store = tuple(i for i in everything if i in kept or (estimates is not None and covered[i]))
    found = {}
    if len(from_store) < len(everything):  # the plan's own GLS, for what the store does not answer
        fresh = plan.answer(measurement)
        found = {index: (fresh.values[i], fresh.variances[i]) for i, index in enumerate(measured)}
    if from_store:
        found.update(session.store.answer(prepared.rows, batch.workload, from_store))
    gls = Answers(tuple(found[i][0] for i in everything), tuple(found[i][1] for i in everything))
    answers, note = _finished(session, prepared, gls, plan, measurement, from_store=len(from_store) == len(everything), batch=batch)
    combined = bool(kept) or (estimates is not None and earlier > 0 and bool(from_store))
    outcome = Outcome("combined" if combined else "measured", note=note)
    variances_of = plan.variances_of if not from_store else None  # the plan's covariances hold for its own answers only
    return _with_explanation(session, prepared, batch.results(answers.values, answers.variances, variances_of), outcome)


def _zero_results(batch: CompiledBatch) -> list[ResultSet]:
    if batch.workload is None:
        return batch.results([], [])
    zeros = [np.zeros(p.rows) for p in batch.workload.products]
    return batch.results(zeros, zeros)


def _from_store(session: Session, prepared: Prepared, products: tuple[int, ...]) -> Answers:
    workload = prepared.batch.workload
    assert workload is not None
    found = session.store.answer(prepared.rows, workload, products)
    return Answers(tuple(found[i][0] for i in products), tuple(found[i][1] for i in products))


def _finished(
    session: Session, prepared: Prepared, gls: Answers, plan: planner.Plan | None, measurement: Measurement | None,
    from_store: bool, batch: CompiledBatch | None = None,
) -> tuple[Answers, str | None]:
    """The answers to release (GLS, or non-negative ones when asked) and the note saying how."""
    if not prepared.request.non_negative:
        return gls, None
    workload = (batch or prepared.batch).workload
    assert workload is not None
    if from_store:
        finished = nonnegative.from_store(session.store, prepared.rows, workload, gls)
    elif plan is not None and measurement is not None and not prepared.decision.kept:
        finished = nonnegative.from_measurement(plan, measurement, gls)
    else:
        finished = nonnegative.unavailable(gls, "the batch combines kept measurements with a fresh one that cannot be kept")
    return finished.answers, finished.note


def _with_explanation(session: Session, prepared: Prepared, results: list[ResultSet], outcome: Outcome) -> list[ResultSet]:
    """The results, explained on demand (the text is a pure function of the prepared request and what
    release did: rendering it, SVD bound included, costs nothing until someone reads it)."""
    text = Explanation(prepared, outcome)
    return [result.explained(text) for result in results]
