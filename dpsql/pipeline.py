"""The one statement pipeline: every entry point runs :func:`prepare`, then :func:`release`.

``Cursor.execute`` (a plain statement is a batch of one; ``EXPLAIN …``), ``Cursor.executemany`` (the
parameter sets as one batch), ``Connection.workload`` (a batch), ``Connection.explain`` and the server
build a :class:`Request` and hand it to the same two stages.

**prepare** reads no data and charges nothing; every check that can fail runs here, in the ordered stages of
:data:`PREPARE_STAGES` (:func:`draft` runs a prefix of them). It parses each text
once (``dpsql.sql.statement``), binds names and types against the registered table, gives every column
without a declared domain its domain — a key set released earlier, or, when the statement must select
its keys, a placeholder — compiles all statements into one workload (``dpsql.workloads``), and decides
what to measure: for known domains the plan (``planner.plan``) and which products kept measurements
already answer at least as accurately as a fresh measurement at the requested cost would
(``planner.store``); for a statement that selects keys, how it selects them (``dpsql.selection``: from the
measured counts themselves, or by a split of its budget), checked to be runnable for any data.

**release** runs the ordered stages of :data:`RELEASE_STAGES` over the cores, then the shells. It follows one
charge rule: a statement that reads nothing (every answer already kept, or zero
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
import datetime
import functools
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sqlglot import exp

import planner
from dpsql import keys, nonnegative, progress, selection, testing, truncation
from dpsql.accountant import Cost, check_number
from dpsql.backends.dialects import engine_name
from dpsql.costs import privacy_of
from dpsql.errors import Error, InternalError, NotSupportedError, OperationalError, ProgrammingError
from dpsql.explain import ComposedExplanation, Explanation, Outcome, explain_result
from dpsql.post_processing import ShellPlan, core_layout
from dpsql.request import Decision, Output, Part, Prepared, Request
from dpsql.result import OutputColumn, ResultSet, output_columns
from dpsql.schema import ColumnDomain
from dpsql.session import Session, Table
from dpsql.sql.bounded import BoundedAggregation, KeyedColumn, KeyHistogram
from dpsql.sql.bounded_rows import LEVEL_NAME
from dpsql.sql.literals import ColumnType
from dpsql.sql.moments import ValueEncoding
from dpsql.sql import clipping, data_vectors, quantile_paths
from dpsql.sql.compile import MAX_RELEASED_CELLS, too_many_cells
from dpsql.sql.kinds import counted_columns
from dpsql.sql.parse import AGGREGATE_TARGET, LIMIT_TARGET, placeholder_targets, predicate_columns
from dpsql.sql.settings import COST_SETTINGS, SettingCommand, TextCost
from dpsql.sql.split import Bound, bind
from dpsql.sql.statement import ParsedText, Statement, parse_text
from dpsql.types import NUMBER, STRING
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
    session: Session, operation: object, parameters: Sequence[object] | None, epsilon: float | None, rho: float | None,
    non_negative: bool | None,
) -> Request:
    """``cursor.execute(operation, parameters)``: one statement, or ``EXPLAIN`` of one or several."""
    public = session.public_names()
    if isinstance(operation, str) and (parameters is None or (isinstance(parameters, (list, tuple)) and not parameters)):
        explain, statements = _bound_text(operation, public)
    else:
        parsed = _parsed(operation) if isinstance(operation, str) else parse_text(operation)
        if parsed.explain and parameters and len(parsed.trees) > 1:
            raise ProgrammingError("EXPLAIN of several statements takes no parameters; inline the literals")
        explain, statements = parsed.explain, tuple(bind(tree, parameters, text, public) for tree, text in zip(parsed.trees, parsed.texts))
    said = _said_by_batch(statements)
    cost = session.cost(epsilon, rho, said)
    return _request(statements, (1.0,) * len(statements), cost, _non_negative(session, non_negative, said), explain, said.delta)


@functools.lru_cache(maxsize=BOUND_TEXT_CACHE_SIZE)
def _bound_text(text: str, public: frozenset[str]) -> tuple[bool, tuple[Bound, ...]]:
    """A text without parameters, parsed and bound: a pure function of the text and the public tables' names
    (binding copies the parsed trees and checks the statement's form only; names are resolved against tables
    in ``prepare``), so a text run again skips sqlglot. Texts that fail raise each time (exceptions are not
    cached)."""
    parsed = parse_text(text)
    return parsed.explain, tuple(bind(tree, None, sql, public) for tree, sql in zip(parsed.trees, parsed.texts))


@functools.lru_cache(maxsize=BOUND_TEXT_CACHE_SIZE)
def _parsed(text: str) -> ParsedText:
    """A text with parameters, parsed once (binding works on a copy of the trees)."""
    return parse_text(text)


def many_request(
    session: Session, operation: object, seq_of_parameters: object, epsilon: float | None, rho: float | None, non_negative: bool | None
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
    public = session.public_names()
    statements = tuple(bind(parsed.trees[0], p, parsed.texts[0], public) for p in seq_of_parameters)  # type: ignore[arg-type]
    said = statements[0].cost
    cost = session.cost(epsilon, rho, said)
    total = None if cost is None else Cost.combined([cost] * len(statements))
    return _request(statements, (1.0,) * len(statements), total, _non_negative(session, non_negative, said), False, said.delta)


def batch_request(
    session: Session,
    statements: object,
    parameters: object,
    weights: object,
    epsilon: float | None,
    rho: float | None,
    non_negative: bool | None,
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
    public = session.public_names()
    if all(isinstance(sql, str) for sql in statements) and all(p is None or (isinstance(p, (list, tuple)) and not p) for p in parameters):
        bound: Sequence[Bound] = _bound_batch(tuple(statements), public)  # type: ignore[arg-type]
    else:
        bound = tuple(_bound_member(parse_text(sql), params, public) for sql, params in zip(statements, parameters))
    said = _said_by_batch(bound)
    cost = session.cost(epsilon, rho, said)
    return _request(bound, _weights(weights, count), cost, _non_negative(session, non_negative, said), explain, said.delta)


@functools.lru_cache(maxsize=BOUND_BATCH_CACHE_SIZE)
def _bound_batch(texts: tuple[str, ...], public: frozenset[str]) -> tuple[Bound, ...]:
    """A batch of texts without parameters, parsed and bound (as :func:`_bound_text`, for a whole batch:
    a repeated workload of hundreds of statements skips sqlglot)."""
    return tuple(_bound_member(parse_text(text), None, public) for text in texts)


def _bound_member(parsed: ParsedText, parameters: object, public: frozenset[str]) -> Bound:
    if parsed.explain:
        raise ProgrammingError("a workload's statements are SELECTs; pass explain=True to explain the batch")
    return bind(parsed.trees[0], parameters, parsed.texts[0], public)  # type: ignore[arg-type]


def _request(
    bound: Sequence[Bound], weights: Sequence[float], cost: Cost | None, non_negative: bool, explain: bool, delta: float | None
) -> Request:
    """The request of the statements as written: the planned statements are each plain statement and each
    shell's private cores (one batch: one plan, one read, one charge), a shell's cores weighted as it is."""
    planned: list[Statement] = []
    planned_weights: list[float] = []
    outputs: list[Output] = []
    for statement, weight in zip(bound, weights):
        cores = [statement] if isinstance(statement, Statement) else [core.statement for core in statement.cores]
        outputs.append(Output(None if isinstance(statement, Statement) else statement, len(planned), len(cores)))
        planned += cores
        planned_weights += [weight] * len(cores)
    shells = tuple(outputs) if any(o.shell is not None for o in outputs) else ()
    return Request(tuple(planned), tuple(planned_weights), cost, non_negative, explain, delta, shells)


def _said_by_batch(statements: Sequence[Bound]) -> TextCost:
    """What the texts of a batch say it costs: nothing, or — when every statement gives its cost — their sum."""
    said = [s.cost for s in statements]
    if len(said) == 1 or not any(s.given for s in said):
        return said[0] if len(said) == 1 else TextCost(non_negative=said[0].non_negative)
    if not all(s.given for s in said) or len({s.epsilon is None for s in said}) > 1:
        raise ProgrammingError(
            "some statements of the batch give their cost in SQL and some do not (or some in epsilon, some in rho): "
            "give every statement its cost, or give the batch's cost as epsilon="
        )
    deltas = [s.delta for s in said if s.delta is not None]
    if said[0].epsilon is not None:
        return TextCost(epsilon=math.fsum(s.epsilon for s in said), delta=sum(deltas) if deltas else None, where="the statements' costs")  # type: ignore[misc]
    return TextCost(rho=math.fsum(s.rho for s in said), delta=sum(deltas) if deltas else None, where="the statements' costs")  # type: ignore[misc]


def _non_negative(session: Session, asked: bool | None, said: TextCost) -> bool:
    """``non_negative=`` of the call, else what the text or ``SET dpsql.non_negative`` says, else the connection's."""
    if asked is not None:
        return asked
    chosen = said.before(session.said).non_negative
    return session.settings.non_negative if chosen is None else chosen


def _weights(weights: object, count: int) -> tuple[float, ...]:
    if weights is None:
        return (1.0,) * count
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence) or len(weights) != count:
        raise ProgrammingError(f"weights= needs one positive number per statement ({count}), got {weights!r}")
    return tuple(check_number("every statement weight", w, 1e-100, 1e100, why="weights trade accuracy between statements") for w in weights)


def setting_result(session: Session, command: SettingCommand) -> ResultSet:
    """``SET dpsql.epsilon = 0.2`` (also ``rho``, ``non_negative``; ``DEFAULT``), ``RESET dpsql.x``, ``SHOW dpsql.x``
    and ``SHOW dpsql.budget`` on a connection: the default cost of its later statements (``dpsql.sql.settings``)."""
    session.check_open()
    if command.action == "show" and command.name == "budget":
        left = session.ledger.remaining()
        columns = tuple((name, NUMBER, None, None, None, None, False) for name in ("epsilon", "delta", "rho"))
        return ResultSet(columns, [(float(left.epsilon), float(left.delta), float(left.rho))], [(None, None, None)])
    if command.name not in COST_SETTINGS:
        serve = "; dpsql.errors is a setting of dpsql serve (in-process, read cursor.errors)" if command.name == "errors" else ""
        raise ProgrammingError(
            f"unrecognized setting dpsql.{command.name}; dpsql has {', '.join(COST_SETTINGS)} (and SHOW dpsql.budget){serve}"
        )
    current = {name: value for name, value in (("epsilon", session.said.epsilon), ("rho", session.said.rho), ("non_negative", session.said.non_negative)) if value is not None}
    if command.action == "show":
        default = {"epsilon": session.settings.default_epsilon, "non_negative": session.settings.non_negative}.get(command.name)
        value = current.get(command.name, default)
        text = "" if value is None else ("on" if value else "off") if isinstance(value, bool) else str(value)
        return ResultSet(((f"dpsql.{command.name}", STRING, None, None, None, None, False),), [(text,)], [(None,)])
    current.pop(command.name, None)
    if command.action == "set" and command.value is not None:
        if command.name != "non_negative":
            current.pop("rho" if command.name == "epsilon" else "epsilon", None)
        current[command.name] = command.value  # type: ignore[assignment]
    said = TextCost.from_values({name: str(value) for name, value in current.items()}, "SET dpsql")
    if said.rho is not None and session.settings.noise != "gaussian":
        raise ProgrammingError("SET dpsql.rho is for Gaussian noise: connect(..., noise='gaussian'); set dpsql.epsilon here")
    session.said = said
    return ResultSet((), [], [])


# ---------------------------------------------------------------------------------------------------
# Prepare: everything that can fail, before any private row is read.
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Draft:
    """What prepare knows so far about a request: each stage of :data:`PREPARE_STAGES` adds to it. A stage that
    decides the request is ready sets ``prepared``; later stages of the cores then have nothing to do."""

    request: Request
    table: Table | None = None
    keyed: str | None = None  # the column without declared domain the statements use (``keys``)
    joint: tuple[str, ...] = ()  # further such columns: a key is the tuple of their values with ``keyed``'s
    selecting: bool = False  # whether their keys are selected by this request
    cached: tuple[keys.KeySet, ...] | None = None  # their released key sets (``keyed``'s, then ``joint``'s), when used
    public: tuple[tuple[str, keys.KeySet], ...] = ()  # such columns with released keys, public beside one whose keys are selected
    batch: CompiledBatch | None = None
    compiled_from: tuple[object, ...] = ()  # what ``batch`` was compiled from (its memo key's inputs)
    rows: Hashable = None  # the store's rows key
    cost: Cost | None = None  # what is priced (the unit cost for EXPLAIN without one)
    prepared: Prepared | None = None


def prepare(session: Session, request: Request) -> Prepared:
    """Bind, compile, plan and price ``request`` (module doc), and check the public shells of its statements over
    empty releases (``dpsql.post_processing``): the stages of :data:`PREPARE_STAGES`, in order. Reads nothing,
    charges nothing."""
    prepared = draft(session, request).prepared
    assert prepared is not None
    return prepared


def draft(session: Session, request: Request, until: str | None = None) -> Draft:
    """The stages of :data:`PREPARE_STAGES` run in order on ``request`` — all of them, or through ``until``."""
    session.check_open()
    known = Draft(request)
    split = data_vectors.parts([[i for b in s.branches for i in b.query.select] for s in request.statements])
    if len(split) > 1:  # several data vectors: each part through the core stages on its own (``_composed``)
        known = dataclasses.replace(known, prepared=_composed(session, request, split))
    for name, stage in PREPARE_STAGES:
        if known.prepared is None or name in _AFTER_CORES:
            known = stage(session, known)
        if name == until:
            break
    return known


def _composed(session: Session, request: Request, split: list[list[int]]) -> Prepared:
    """A request over several data vectors (``dpsql.sql.data_vectors``): each part prepared on its own at the share
    of the budget ``planner.composition_shares`` chooses from the parts' expected errors at the whole budget (each
    part planned once at a unit cost to price it), charged once as their sequential composition."""
    total = request.cost if request.cost is not None else _unit_cost(session)
    unit = Cost.pure(1.0) if total.epsilon is not None else Cost.zcdp(1.0)
    errors = []
    for indices in split:
        probe = draft(session, _part_request(request, indices, unit, explain=True), until="plan").prepared
        assert probe is not None
        if probe.keyed is not None or probe.chosen is not None:
            what = f"the column {probe.keyed!r}, which has no declared domain" if probe.keyed is not None else "max_rows_per_unit: auto"
            raise NotSupportedError(
                f"aggregates over several columns (or COUNT(DISTINCT) beside other aggregates) with {what}, are not supported "
                "in one statement: send one statement per aggregated column"
            )
        fresh = probe.decision.fresh  # its error in count units (a moment block's answers are divided by its scale)
        errors.append(0.0 if fresh is None else float(fresh.expected_error()) / probe.batch.scale**2)
    shares = planner.composition_shares(errors, laplace=total.epsilon is not None)
    costs = [_share_of(total, share) for share in shares[:-1]]
    if total.epsilon is not None:
        costs.append(Cost.pure(total.epsilon - math.fsum(c.epsilon for c in costs)))  # type: ignore[misc]
    else:
        costs.append(_share_of(total, 1 - math.fsum(shares[:-1])))
    given = request.cost is not None or request.explain
    parts = tuple(
        Part(tuple(indices), share, prepare(session, _part_request(request, indices, cost if given else None, request.explain)))
        for indices, share, cost in zip(split, shares, costs)
    )
    reading = [part.prepared.cost for part in parts if part.prepared.reads]
    first = next(part for part in parts if 0 in part.statements).prepared
    charged = Cost.combined(reading) if reading else _free(total)
    return dataclasses.replace(first, request=request, cost=charged, parts=parts, shells=())


def _part_request(request: Request, indices: Sequence[int], cost: Cost | None, explain: bool) -> Request:
    """The request of one part of a composed request: its statements, weights and cost, no shells."""
    return Request(
        tuple(request.statements[i] for i in indices), tuple(request.weights[i] for i in indices), cost, request.non_negative,
        explain, request.selection_delta,
    )


def _share_of(cost: Cost, share: float) -> Cost:
    """A share of a cost (sequential composition splits ε, or ρ, linearly)."""
    if cost.epsilon is not None:
        return Cost.pure(cost.epsilon * share)
    return dataclasses.replace(cost, rho=cost.rho * share, approximate_epsilon=cost.approximate_epsilon * share, delta=cost.delta * share)


def _relation(session: Session, draft: Draft) -> Draft:
    """The one relation every planned statement reads (one pass over its rows): a registered table, or the joined
    relation of a FROM clause (``Session.relation``); Google's options checked against its schema."""
    statements = draft.request.statements
    table = session.relation(statements[0].branches[0].query)
    for statement in statements[1:]:
        if session.relation(statement.branches[0].query) is not table:
            raise NotSupportedError(
                f"a batch reads one table (one pass over its rows); {table.name!r} and {statement.table!r} are both used: "
                "send one workload per table"
            )
    for statement in statements:
        _check_options(statement, table)
    return dataclasses.replace(draft, table=table)


def _keys(session: Session, draft: Draft) -> Draft:
    """The column without declared domain the statements use, and whether this request selects its keys."""
    assert draft.table is not None
    columns, selecting = _keyed_columns(session, draft.table, draft.request.statements)
    if not columns:
        return draft
    found = {c: session.keys.get(draft.table, c) for c in columns}
    if not selecting:
        return dataclasses.replace(draft, keyed=columns[0], joint=columns[1:], cached=tuple(found.values()))  # type: ignore[arg-type]
    uncached = [c for c in columns if found[c] is None]
    if len(uncached) == 1:  # one column's keys are selected; the released key sets of the others are public domains
        public = tuple((c, k) for c, k in found.items() if k is not None)
        return dataclasses.replace(draft, keyed=uncached[0], selecting=True, public=public)  # type: ignore[arg-type]
    return dataclasses.replace(draft, keyed=columns[0], joint=columns[1:], selecting=True)


def _compile(session: Session, draft: Draft) -> Draft:
    """Every planned statement → one workload over public domains (``dpsql.workloads``), memoised."""
    table, keyed, request = draft.table, draft.keyed, draft.request
    assert table is not None
    schema = table.schema
    if keyed is not None:
        names = (keyed, *draft.joint)
        domains = tuple(keys.placeholder_domain(c) for c in names) if draft.selecting else tuple(k.domain(c) for k, c in zip(draft.cached, names))  # type: ignore[arg-type]
        domains += tuple(k.domain(c) for c, k in draft.public)
        names += tuple(c for c, _ in draft.public)
        schema = dataclasses.replace(schema, columns=tuple(c for c in schema.columns if c.name not in names) + domains)
    inputs = (request.statements, request.weights, schema, tuple(table.column_types), session.settings.excluded_cells, True)
    batch = session.memoised("compiled", inputs, lambda: compile_batch(*inputs[:4], excluded_cells=inputs[4], zero_nulls=inputs[5]))
    if batch.encoding is not None and batch.encoding.null_as_zero and session.settings.reuse:
        with_null_cell = dataclasses.replace(batch.encoding, null_cell=True, null_as_zero=False)
        if session.store.measurement_count(_rows_key(table.name, batch, with_null_cell)):  # kept with the NULL cell: read it
            inputs = (*inputs[:5], False)
            batch = session.memoised("compiled", inputs, lambda: compile_batch(*inputs[:4], excluded_cells=inputs[4], zero_nulls=False))
    return dataclasses.replace(draft, batch=batch, compiled_from=inputs, rows=_rows_key(table.name, batch, batch.encoding))


def _rows_key(table: str, batch: CompiledBatch, encoding: ValueEncoding | None) -> Hashable:
    """What kept measurements of ``batch`` are filed under: its table and row filters, the moment cells'
    meaning (kept measurements are in these units only) and the counted (unit, group) pairs."""
    moments = () if encoding is None else (encoding.cells_key,)
    pairs = () if batch.distinct is None else (batch.distinct.key(),)
    return (table.lower(), tuple((f.scope, f.mask.tobytes()) for f in batch.row_filters), *moments, *pairs)


def _refusals(session: Session, draft: Draft) -> Draft:
    """What a column without declared domain cannot be combined with."""
    batch, keyed = draft.batch, draft.keyed
    assert batch is not None
    if keyed is None:
        return draft
    if batch.derived:
        raise NotSupportedError(
            f"GROUP BY {next(iter(batch.derived))[:60]!r}: a derived group column cannot be combined with the column "
            f"{keyed!r}, which has no declared domain; declare {keyed!r}'s domain, or group by the derived column in a "
            "statement of its own"
        )
    if batch.workload is None:
        raise NotSupportedError(
            f"GROUP BY {keyed} (or SELECT DISTINCT) without an aggregate: column {keyed!r} has no declared domain, so its keys "
            "are released only with their noisy counts: add COUNT(*), or declare its categories, range or bins"
        )
    if batch.encoding is not None and batch.encoding.reads_index:
        raise NotSupportedError(
            f"SUM/AVG/VARIANCE/STDDEV with column {keyed!r}, which has no declared domain, is not supported here: clip: auto "
            "and bounds: auto choose their clips from the rows of declared domains only; declare the aggregated column's "
            f"bounds, or the categories, range or bins of {keyed!r}"
        )
    if batch.distinct is not None and (draft.joint or draft.public or batch.distinct.group != (keyed,)):
        raise NotSupportedError(
            f"COUNT(DISTINCT {batch.distinct.unit}) with the column {keyed!r}, which has no declared domain, is supported "
            f"grouped by {keyed!r} alone: write SELECT {keyed}, COUNT(DISTINCT {batch.distinct.unit}) … GROUP BY {keyed}, "
            f"or declare {keyed!r}'s categories, range or bins"
        )
    if draft.joint and draft.selecting and batch.workload is not None:
        selection.check_joint(batch.workload, (keyed, *draft.joint))
    if not draft.selecting and batch.workload is not None:
        others = (s for a, s in zip(batch.workload.domain.attributes, batch.workload.domain.sizes) if a not in (keyed, *draft.joint))
        if math.prod(others) > selection.MAX_KEYED_OTHER_CELLS:
            raise NotSupportedError(selection.too_many_cells(keyed))
    return draft


def _cost(session: Session, draft: Draft) -> Draft:
    """The cost to price; a request that measures nothing is ready (free): declared keys only, or every count zero."""
    request, batch = draft.request, draft.batch
    assert batch is not None and draft.table is not None
    cost = request.cost if request.cost is not None else _unit_cost(session)
    nothing = Decision(None, (), (), None)
    free = Prepared(request, draft.table, batch, draft.rows, None, draft.keyed, None, nothing, _free(cost), joint=draft.joint)
    if batch.workload is None and not batch.measures:  # declared keys only: public, free whatever the cost
        return dataclasses.replace(draft, cost=cost, prepared=free)
    if request.cost is None and not request.explain:
        raise ProgrammingError(
            "the statement has no privacy cost: pass execute(sql, epsilon=...) or connect(..., default_epsilon=...)"
        )
    return dataclasses.replace(draft, cost=cost, prepared=free if batch.workload is None else None)


def _selection(session: Session, draft: Draft) -> Draft:
    """A request that selects keys is ready with its selection (``dpsql.selection``), runnable for any data."""
    if not draft.selecting:
        return draft
    assert draft.table is not None and draft.batch is not None and draft.keyed is not None and draft.cost is not None
    privacy = privacy_of(draft.cost)
    chosen = selection.design(session, draft.table, draft.batch, (draft.keyed, *draft.joint), privacy, draft.request.selection_delta, bool(draft.public))
    prepared = Prepared(
        draft.request, draft.table, draft.batch, draft.rows, privacy, draft.keyed, chosen, Decision(None, (), (), None), selection.cost(chosen),
        joint=draft.joint, public=draft.public,
    )
    return dataclasses.replace(draft, prepared=prepared)


def _plan(session: Session, draft: Draft) -> Draft:
    """The plan at the requested cost, and what kept measurements already answer at least as accurately."""
    table, batch, cost, request = draft.table, draft.batch, draft.cost, draft.request
    assert table is not None and batch is not None and batch.workload is not None and cost is not None
    whole = privacy_of(cost)
    cached = None if draft.cached is None else math.prod(len(k) for k in draft.cached)
    if table.schema.choose_bound:  # the statement chooses its bound (``dpsql.truncation``): no kept measurement applies
        chosen = truncation.design(table, batch, whole, draft.keyed, table.fan_out)
        widest = chosen.plan(batch.workload, chosen.choice.truncations[-1])
        everything = tuple(range(len(batch.workload.products)))
        decision = Decision(widest, everything, (), widest)
        return dataclasses.replace(
            draft, prepared=Prepared(request, table, batch, draft.rows, whole, draft.keyed, None, decision, cost, cached, chosen=chosen, joint=draft.joint)
        )
    clip_share = 0.0 if draft.keyed is not None else clipping.share(batch.encoding)
    privacy = whole.scaled(1 - clip_share) if clip_share else whole  # the clip first, then the rest
    contributions = table.schema.contributions * batch.scale if batch.distinct is None else batch.distinct.contributions
    if batch.distinct is not None and not privacy.is_laplace and draft.keyed is None:
        # a unit's pairs lie in distinct cells of the group marginal, the one marginal the summed identity
        # measures: L2 sensitivity √k (L1 is k whatever the strategy, so pure DP takes the planner's best)
        fresh, balance = planner.identity_plan(batch.workload, privacy, contributions, distinct_cells=True), None
    else:
        fresh, balance = _planned(session, batch, privacy, contributions)
    paths = None if draft.keyed is not None else session.memoised(
        "quantile paths", (draft.compiled_from, privacy, contributions), lambda: quantile_paths.choose(batch, fresh, privacy, table.schema.contributions)
    )
    exponential = paths is not None and paths.exponential
    if exponential:  # the mechanisms need a read: the linear plan runs at its share, nothing answered from kept measurements
        fresh, balance = _planned(session, batch, paths.privacy(privacy), contributions)  # type: ignore[union-attr]
    clip = clipping.design(batch.encoding, whole, table.schema.contributions, clipping.noise_slope(batch, fresh)) if clip_share else None
    mechanisms = (paths.spent() if exponential else 0.0) + (clip.spent() if clip is not None else 0.0)  # type: ignore[union-attr]
    _check_spent(fresh.privacy, whole, mechanisms)
    reusable = request.cost is not None and not exponential and clip is None  # a clipped measurement is never kept
    decision = _decision(session, batch.workload, fresh, draft.rows, privacy, contributions, reusable)
    if decision.plan is not None:
        _check_feasible(session, batch, decision.plan)
    spent = cost if decision.plan is not None else _free(cost)
    prepared = Prepared(request, table, batch, draft.rows, privacy, draft.keyed, None, decision, spent, cached, paths, clip, balance, joint=draft.joint)
    return dataclasses.replace(draft, prepared=prepared)


def _planned(session: Session, batch: CompiledBatch, privacy: planner.Privacy, contributions: int) -> tuple[planner.Plan, planner.Balance | None]:
    """The batch's plan: for one statement of several grouping sets (CUBE, ROLLUP, GROUPING SETS) balanced so
    that each set is at least as accurate as measured on its own share of the budget (``planner.plan_balanced``);
    otherwise the least total error."""
    assert batch.workload is not None
    parts = []
    if len(batch.statements) == 1:
        compiled = batch.statements[0]
        for branch, first in zip(compiled.branches, compiled.first_products):
            if branch.workload is not None:
                parts.append(tuple(range(first, first + len(branch.workload.products))))
    if len(parts) < 2:
        return session.plan(batch.workload, privacy, contributions), None
    plan, balance = planner.plan_balanced(batch.workload, parts, privacy, lambda w, p: session.plan(w, p, contributions))
    return plan, balance  # type: ignore[return-value]


def _shells(session: Session, draft: Draft) -> Draft:
    """Each public shell run once by DuckDB over empty releases of its cores (every declared group cell, zeros),
    which also types its cores' relations: a shell that does not bind is refused here, free."""
    prepared = draft.prepared
    assert prepared is not None
    if not draft.request.outputs:
        return draft

    def checked() -> tuple[ShellPlan | None, ...]:
        empty = _zero_core_results(prepared)
        found: list[ShellPlan | None] = []
        for output in draft.request.written:
            if output.shell is None:
                found.append(None)
                continue
            cores = tuple(core_layout(core.relation, empty[i]) for core, i in zip(output.shell.cores, output.cores))
            found.append(ShellPlan(cores, session.public.check(output.shell, cores, [empty[i] for i in output.cores])))
        return tuple(found)

    # a pure function of public inputs (the compiled statements, the shells' SQL, the public tables), checked
    # again after a public table is registered
    texts = tuple(o.shell.text if o.shell is not None else None for o in draft.request.written)
    compiled = draft.compiled_from or tuple(p.prepared.batch for p in prepared.parts)
    shells = session.memoised("shells", (compiled, texts, session.public.generation), checked)
    return dataclasses.replace(draft, prepared=dataclasses.replace(prepared, shells=shells))


def _empty_releases(prepared: Prepared) -> list[ResultSet]:
    """Every planned statement's empty release (:func:`_zero_results`); where a key still to be selected stands
    (``keys.PLACEHOLDER_KEY``), an example value of the column's engine type, so that the shell sees the key
    column typed as the released keys will be."""
    results = _zero_results(prepared.batch)
    if prepared.selection is None:
        return results
    examples = []
    for compiled, result in zip(prepared.batch.statements, results):
        kinds = [c.kind for c in output_columns(compiled.statement, compiled.branches, prepared.table.column_types)]
        rows = [tuple(_EXAMPLES[k] if v is keys.PLACEHOLDER_KEY else v for v, k in zip(row, kinds)) for row in result.rows]
        examples.append(dataclasses.replace(result, rows=rows))
    return examples


LEVEL_TYPE = ColumnType.of("INTEGER", "duckdb")  # a row's level (``dpsql.truncation``)
Stage = Callable[[Session, Draft], Draft]
PREPARE_STAGES: tuple[tuple[str, Stage], ...] = (
    ("relation", _relation),
    ("keys", _keys),
    ("compile", _compile),
    ("refusals", _refusals),
    ("cost", _cost),
    ("selection", _selection),
    ("plan", _plan),
    ("shells", _shells),
)
"""Prepare, in order: each stage refuses what it can before any private row is read."""
_AFTER_CORES = frozenset({"shells"})  # stages that run once the cores are ready


def _check_options(statement: Statement, table: Table) -> None:
    """Google's ``OPTIONS(privacy_unit_column=…, max_groups_contributed=…)`` must say what the table's schema
    declares: the privacy unit and the contribution bounds are the schema's, for every statement."""
    schema = table.schema
    for name, value in statement.checks:
        if name == "privacy_unit_column" and (schema.privacy_unit is None or value.lower() != schema.privacy_unit.lower()):
            declared = "no privacy unit column (one row is one unit)" if schema.privacy_unit is None else f"privacy unit {schema.privacy_unit!r}"
            raise NotSupportedError(
                f"OPTIONS(privacy_unit_column = {value}): the schema of {table.name!r} declares {declared}; the unit is the "
                "schema's for every statement: drop the option or name that column"
            )
        if name == "max_groups_contributed" and int(value) != schema.max_groups_per_unit:
            raise NotSupportedError(
                f"OPTIONS(max_groups_contributed = {value}): the schema of {table.name!r} bounds a unit to "
                f"{schema.max_groups_per_unit} group(s) (max_groups_per_unit); drop the option or give that value"
            )


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


def _keyed_columns(session: Session, table: Table, statements: Sequence[Statement]) -> tuple[tuple[str, ...], bool]:
    """The columns without a declared domain the statements group by (or use with released keys), and
    whether their keys must be selected now: when one of them has no released key set, the keys of all of
    them are selected jointly, as tuples (``dpsql.selection``). Refuses what selection cannot serve."""
    if not table.has_undeclared_columns:
        return (), False
    grouped: dict[str, None] = {}
    used: dict[str, None] = {}
    for statement in statements:
        for branch in statement.branches:
            query = branch.query
            for name in query.group_by:
                resolved = table.resolve(name)
                if resolved is not None and not table.schema.column(resolved).is_known:
                    grouped[resolved] = None
            mentioned = counted_columns(query)
            mentioned += list(predicate_columns(query.where)) if query.where is not None else []
            for name in mentioned:
                resolved = table.resolve(name)
                if resolved is not None and not table.schema.column(resolved).is_known and session.keys.get(table, resolved) is not None:
                    used[resolved] = None
    columns = tuple(dict.fromkeys([*grouped, *used]))
    for column in columns:
        if not table.column_types[column].can_hold_keys:
            raise NotSupportedError(
                f"GROUP BY: column {column!r} has type {table.column_types[column].name}; keys of a column with no declared "
                "domain must be strings, numbers, booleans, dates or timestamps: declare its domain, or group by another column"
            )
    selecting = any(session.keys.get(table, c) is None for c in columns)
    if selecting:
        for statement in statements:
            for branch in statement.branches:
                where = branch.query.where
                named = [c for c in columns if where is not None and any(table.resolve(p) == c for p in predicate_columns(where))]
                if named:
                    raise NotSupportedError(
                        f"WHERE: column {named[0]!r} has no declared domain in the schema of {table.name!r}, and this statement "
                        "selects its keys; declare its categories, range or bins, or select its keys first with a GROUP BY "
                        "on it (a predicate on it cannot be compiled to a mask over a public domain)"
                    )
    return columns, selecting


def _check_spent(spent: planner.Privacy, requested: planner.Privacy, mechanisms: float = 0.0) -> None:
    """The plan (and the exponential mechanisms beside it, ``mechanisms`` in the family's unit: ε or ρ) spend
    exactly what was asked."""
    budget = (lambda p: p.epsilon) if requested.is_laplace else (lambda p: p.rho)
    total = budget(spent) + mechanisms if spent.family == requested.family else math.inf
    if abs(total - budget(requested)) > 1e-9 * budget(requested):
        raise InternalError(f"the plan spends {spent}, not the requested {requested}; refusing to run it")


def _no_worse(candidates: tuple[int, ...], answered: Mapping[int, tuple[np.ndarray, np.ndarray]], fresh: Sequence[np.ndarray]) -> tuple[int, ...]:
    """The candidate products whose kept answers are, row by row, at least as accurate as a fresh plan's
    (one vectorised comparison: a repeated batch asks it of thousands of products). At least one candidate."""
    kept_variances = [np.ravel(answered[i][1]) for i in candidates]
    sizes = np.array([v.size for v in kept_variances])
    limits = np.concatenate([np.resize(fresh[i], n) if np.size(fresh[i]) != n else np.ravel(fresh[i]) for i, n in zip(candidates, sizes)])
    worse = np.concatenate(kept_variances) > limits * (1 + RELATIVE_TOLERANCE) + 1e-12
    worse_rows = np.add.reduceat(worse, np.r_[0, np.cumsum(sizes)[:-1]])  # every product has at least one row
    return tuple(i for i, bad in zip(candidates, worse_rows) if not bad)


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
    kept = _no_worse(candidates, answered, fresh.query_variances()) if candidates else ()  # nothing kept: no cell's variance needed
    variances = {i: answered[i][1] for i in kept}
    count = session.store.measurement_count(rows)
    kept_set = set(kept)
    measured = tuple(i for i in everything if i not in kept_set)
    if not measured:
        return Decision(None, (), kept, fresh, variances, count)
    if not kept:
        return Decision(fresh, everything, (), fresh, {}, count)
    plan = session.plan(Workload(workload.domain, tuple(workload.products[i] for i in measured)), privacy, contributions)
    _check_spent(plan.privacy, privacy)
    return Decision(plan, measured, kept, fresh, variances, count)


# ---------------------------------------------------------------------------------------------------
# Describe: what a statement returns and takes, without a read or a charge (the server's Describe).
# ---------------------------------------------------------------------------------------------------

EXPLAIN_COLUMNS = (
    OutputColumn("section", "text", False, False),
    OutputColumn("name", "text", False, False),
    OutputColumn("value", "float", True, False),
    OutputColumn("detail", "text", True, False),
)
_EXAMPLES = {"integer": 0, "numeric": 0, "float": 0.0, "text": "", "boolean": False, "date": datetime.date(2000, 1, 1), "timestamp": datetime.datetime(2000, 1, 1)}


def describe(session: Session, request: Request) -> tuple[OutputColumn, ...]:
    """:func:`prepare`, then the result's columns: every check runs, nothing is read or charged."""
    return layout(prepare(session, request))


def layout(prepared: Prepared) -> tuple[OutputColumn, ...]:
    """The columns :func:`release` returns for ``prepared`` (of its first statement: executemany's runs share them)."""
    if prepared.request.explain:
        return EXPLAIN_COLUMNS
    if prepared.shells and prepared.shells[0] is not None:  # a shell's columns, as prepare's check of it found them
        return prepared.shells[0].columns
    first = prepared.batch.statements[0]
    return output_columns(first.statement, first.branches, prepared.table.column_types)


@dataclasses.dataclass(frozen=True)
class Parameter:
    """A ``?`` of a statement: the kind of value it takes (``OutputColumn.kind``'s names) and an example
    value of that kind which its column's declared domain holds (a statement described before it is
    bound is prepared with the examples: its columns do not depend on the values)."""

    kind: str
    example: object


def table_of(operation: str) -> str | None:
    """The (lower-case) name of the table ``operation`` reads first, None when it names none or does not parse."""
    try:
        named = _parsed(operation).trees[0].find(exp.Table)
    except Error:
        return None
    return None if named is None else named.name.lower()


def parameters(session: Session, operation: str) -> tuple[Parameter, ...]:
    """Each ``?`` of ``operation`` (text order), typed by what it is compared with (``sql.parse.placeholder_targets``):
    a column's values, an integer (LIMIT, OFFSET), a number (an aggregate), else text."""
    parsed = _parsed(operation)
    tree = parsed.trees[0]
    named = tree.find(exp.Table)
    table = session.tables.get(named.name.lower()) if named is not None else None
    found = []
    for target in placeholder_targets(tree):
        if target == LIMIT_TARGET:
            found.append(Parameter("integer", 1))
            continue
        if target == AGGREGATE_TARGET:
            found.append(Parameter("float", 0.0))
            continue
        column = None if table is None or target is None else table.resolve(target)
        if column is None:
            found.append(Parameter("text", ""))
            continue
        kind = table.column_types[column].kind  # type: ignore[union-attr]
        domain = table.schema.column(column) if column in table.schema.column_names else None  # type: ignore[union-attr]
        declared = domain is not None and domain.is_known and bool(domain.values)
        found.append(Parameter(kind, domain.values[0] if declared else _EXAMPLES[kind]))  # type: ignore[union-attr]
    return tuple(found)


# ---------------------------------------------------------------------------------------------------
# Release: charge, read once, measure, keep, build.
# ---------------------------------------------------------------------------------------------------


def run(session: Session, request: Request) -> list[ResultSet]:
    """Prepare and release a request: one result set per statement (EXPLAIN: one of plan rows)."""
    return release(session, prepare(session, request))


def release(session: Session, prepared: Prepared) -> list[ResultSet]:
    """Release a prepared request under the one charge rule (module doc): one result per statement as written,
    a shell's computed by DuckDB from its cores' released rows (post-processing, free)."""
    session.check_open()
    if prepared.request.explain:
        return [explain_result(prepared)]
    results = _release_cores(session, prepared)
    if not prepared.request.outputs:
        return results
    written = []
    for output, plan in zip(prepared.request.written, prepared.shells):
        if output.shell is None or plan is None:
            written.append(results[output.first])
            continue
        shelled = session.public.release(output.shell, plan.cores, [results[i] for i in output.cores])
        written.append(shelled.explained(results[output.first].explained_by))
    return written


@dataclass(frozen=True)
class Reading:
    """What release knows so far about the cores of a prepared request: each stage of :data:`RELEASE_STAGES` adds to
    it. A stage that answers the request sets ``results``; the later stages then have nothing to do."""

    prepared: Prepared
    charged: bool = False  # the ledger was charged: by this release, or by the composed request this is a part of
    aggregation: BoundedAggregation | None = None  # the one bounded aggregation sent
    rows: dict[str, np.ndarray] | None = None  # what the engine returned (dropped once counted)
    rng: np.random.Generator | None = None  # None: OS entropy (a seeded generator only inside ``testing.seeded``)
    counts: KeyHistogram | dict[tuple[str, ...], np.ndarray] | None = None
    clip: int | tuple[float, float] | None = None  # the clip released first, when the statement clips
    results: list[ResultSet] | None = None


def _release_cores(session: Session, prepared: Prepared, charged: bool = False) -> list[ResultSet]:
    """The planned statements' results (a shell's cores among them): the stages of :data:`RELEASE_STAGES`, in order;
    ``charged``: the charge was made by the composed request this is a part of."""
    known = Reading(prepared, charged)
    for name, stage in RELEASE_STAGES:
        known = _after_read(stage, session, known) if name in _AFTER_READ else stage(session, known)
        if known.results is not None:
            return known.results
    raise AssertionError("the last release stage answers")  # pragma: no cover


def _release_parts(session: Session, known: Reading) -> Reading:
    """A composed request is charged once, before any part reads; then each part is released through these stages."""
    prepared = known.prepared
    if not prepared.parts:
        return known
    if prepared.reads:
        session.ledger.charge(prepared.cost, prepared.request.text)  # durable; refuses an overspend before any read
    found: list[ResultSet | None] = [None] * len(prepared.request.statements)
    explained = ComposedExplanation(prepared, [])
    for part in prepared.parts:
        released = _release_cores(session, part.prepared, charged=True)
        explained.parts.append(released[0].explained_by)  # type: ignore[arg-type]  # an Explanation: a part has no parts
        for index, result in zip(part.statements, released):
            found[index] = result
    return dataclasses.replace(known, results=[result.explained(explained) for result in found if result is not None])


def _nothing_to_measure(session: Session, known: Reading) -> Reading:
    """Every count zero by construction, or only declared group keys asked for: free."""
    prepared = known.prepared
    batch = prepared.batch
    if batch.workload is not None:
        return known
    return dataclasses.replace(known, results=_with_explanation(session, prepared, batch.results([], []), Outcome("zero" if batch.measures else "keys")))


def _kept_answers(session: Session, known: Reading) -> Reading:
    """Every answer is kept: free, never refused."""
    prepared = known.prepared
    batch = prepared.batch
    if prepared.reads:
        return known
    assert batch.workload is not None
    gls = _from_store(session, prepared, tuple(range(len(batch.workload.products))))
    answers, note = _finished(session, prepared, gls, None, None, from_store=True)
    results = _with_explanation(session, prepared, batch.results(answers.values, answers.variances), Outcome("free", note=note))
    return dataclasses.replace(known, results=results)


def _charge(session: Session, known: Reading) -> Reading:
    if not known.charged:
        session.ledger.charge(known.prepared.cost, known.prepared.request.text)  # durable; refuses an overspend before the read
    return dataclasses.replace(known, charged=True)


def _read_rows(session: Session, known: Reading) -> Reading:
    """The one read of private rows: the bounded aggregation of every kind's SQL weights (:func:`_aggregation`)."""
    aggregation, kept = _aggregation(session, known.prepared)
    return dataclasses.replace(known, aggregation=aggregation, rows=_read(session, known.prepared.table, aggregation, kept))


def _count(session: Session, known: Reading) -> Reading:
    """What the read counted (:func:`_counted`); the engine's rows (every column of every grouping set) are dropped
    here, before the plan's arrays are made."""
    assert known.aggregation is not None and known.rows is not None
    rng = testing.random_source()
    counts, clip = _counted(known.prepared, known.aggregation, known.rows, rng)
    return dataclasses.replace(known, rows=None, rng=rng, counts=counts, clip=clip)


def _measure(session: Session, known: Reading) -> Reading:
    assert known.counts is not None
    return dataclasses.replace(known, results=_measured(session, known.prepared, known.counts, known.clip, known.rng))


def _after_read(stage: ReleaseStage, session: Session, known: Reading) -> Reading:
    """A stage after the read: it cannot fail on any data, so a failure is a dpsql defect, reported by a fixed text
    (the statement was charged)."""
    try:
        return stage(session, known)
    except Error as error:
        raise InternalError(f"answering the statement failed after its rows were read ({type(error).__name__}); it was charged. "
                            "This is a dpsql defect: please report it") from None
    except Exception as error:  # noqa: BLE001 - nothing after the read may surface data-dependent detail
        raise InternalError(f"answering the statement failed after its rows were read ({type(error).__name__}); it was charged. "
                            "This is a dpsql defect: please report it") from None


ReleaseStage = Callable[[Session, Reading], Reading]
RELEASE_STAGES: tuple[tuple[str, ReleaseStage], ...] = (
    ("parts", _release_parts),
    ("zero", _nothing_to_measure),
    ("kept", _kept_answers),
    ("charge", _charge),
    ("read", _read_rows),
    ("count", _count),
    ("measure", _measure),
)
"""Release of the cores, in order: a composed request's parts (charged once, each released through these stages);
free answers (nothing to measure, or every answer kept); the durable charge; the one read; then, with no failure
that can depend on the data, what the read counted (keys to select, the clip released first) and the measurement
(keys selected, noise drawn, kept, GLS, rows). The shells run after, over the released rows (:func:`release`)."""
_AFTER_READ = frozenset({"count", "measure"})  # stages after the read: a failure there is a defect (:func:`_after_read`)


def _read(session: Session, table: Table, aggregation: BoundedAggregation, kept: bool) -> dict[str, np.ndarray]:
    """The one read of private rows: when it reads the kept bounded rows (``kept``), they are computed first if
    they are not yet (``dpsql.bounded_tables``), then the aggregation runs. The engine's message is withheld: it may
    quote row values."""
    sql = session.memoised("sql", aggregation, lambda: aggregation.statement().sql(dialect=session.backend.dialect, copy=False))

    def read() -> dict[str, np.ndarray]:
        if kept:  # it reads the kept bounded rows: computed by this read if not yet
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


def _aggregation(session: Session, prepared: Prepared) -> tuple[BoundedAggregation, bool]:
    """The bounded aggregation release sends: the plan's marginals, or — when a column's cells are decided
    by key bounding — every (key, other cells) count; and whether it reads the kept bounded rows."""
    table, batch = prepared.table, prepared.batch
    assert batch.workload is not None
    domain = batch.workload.domain
    mentioned = batch.columns
    columns: dict[str, ColumnDomain] = {**mentioned, **{n: c for n, c in table.declared_columns().items() if n not in mentioned}}
    if prepared.keyed is not None:
        keyed = KeyedColumn(
            prepared.keyed, table.schema.max_groups_per_unit, keys.KeyBounds.of(table.schema).max_rows_per_group,
            count_units=prepared.selection is not None or batch.distinct is not None, joint=prepared.read_keys[1:],
        )
        marginals: tuple[tuple[str, ...], ...] = (domain.attributes,)
    else:
        keyed = None
        assert prepared.decision.plan is not None
        paths = prepared.quantile_paths.marginals() if prepared.quantile_paths is not None else ()
        marginals = batch.read_marginals(prepared.decision.plan.required_marginals() + paths)
    attributes = [a for a in batch.read_attributes(domain.attributes) if a in columns]  # not an aggregated column's moment cells
    ordered = {name: columns[name] for name in (*attributes, *(c for c in columns if c not in attributes))}
    types = {c: table.column_types[c] for c in ordered}
    if prepared.chosen is not None:  # every marginal per level of the rows, and the units' histogram (``dpsql.truncation``)
        for name, domain in prepared.chosen.domains().items():
            ordered[name], types[name] = domain, LEVEL_TYPE
        marginals = (*((*m, LEVEL_NAME) for m in marginals), truncation.HISTOGRAM)
    relation, bounded, kept = session.bounded.rows_of(table)
    aggregation = BoundedAggregation(
        table=relation,
        columns=ordered,
        column_types=types,
        marginals=marginals,
        privacy_unit=table.schema.privacy_unit,
        max_rows_per_unit=table.schema.max_rows_per_unit,
        salt=table.salt,
        row_columns=tuple(table.column_types),
        row_filters=batch.row_filters,
        keyed=keyed,
        value=batch.encoding,
        bounded=bounded,
        distinct=None if prepared.keyed is not None else batch.distinct,  # a selection reads each key's distinct units itself
    )
    return aggregation, kept


def _counted(
    prepared: Prepared, aggregation: BoundedAggregation, result: dict[str, np.ndarray], rng: np.random.Generator
) -> tuple[KeyHistogram | dict[tuple[str, ...], np.ndarray], int | tuple[float, float] | None]:
    """What the read counted: per raw key when a column's cells come from key bounding, else the marginals —
    of the clip's cells when the statement clips, the clip released first (``planner.UpperClip``)."""
    if prepared.selection is not None or prepared.keyed is not None:
        return aggregation.key_histogram(result), None
    clip = None if prepared.clip is None else prepared.clip.release(aggregation, result, rng, testing.noise_enabled())
    return aggregation.marginal_arrays(result, clip), clip


def _measured(
    session: Session, prepared: Prepared, counts: KeyHistogram | dict[tuple[str, ...], np.ndarray], clip: int | tuple[float, float] | None,
    rng: np.random.Generator,
) -> list[ResultSet]:
    """Everything after the read and the clip: select (when asked), plan the counts of released keys, measure,
    keep, build."""
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
    arrays: dict[tuple[str, ...], np.ndarray] = {}
    if prepared.chosen is not None:
        assert isinstance(counts, dict)
        return _measured_at_chosen_bound(session, prepared, counts, rng)
    if prepared.keyed is not None:  # a released key set: the column's cells come from key bounding
        assert batch.workload is not None
        columns = prepared.key_columns
        released = tuple(session.keys.get(prepared.table, c) for c in columns)
        assert all(k is not None for k in released) and isinstance(counts, KeyHistogram)
        if batch.distinct is not None:
            counts = keys.distinct_units(counts)
        full = keys.over_domain(keys.table_over_keys(counts, released), columns, batch.workload.domain)  # type: ignore[arg-type]
        required = {m: marginal_for(batch.workload.domain, {batch.workload.domain.attributes: full}, m) for m in plan.required_marginals()}  # type: ignore[union-attr]
    else:
        assert isinstance(counts, dict)
        arrays = counts
        if prepared.clip is not None and clip is not None:  # the answers read the chosen clip's cells
            batch = batch.with_encoding(prepared.clip.clipped(clip))  # type: ignore[arg-type]
        required = batch.folded(plan.required_marginals(), arrays)  # type: ignore[union-attr]
    assert plan is not None and batch.workload is not None
    measurement = plan.measure(required, rng=rng, noise=testing.noise_enabled())
    del required
    chosen = None
    paths = prepared.quantile_paths
    if paths is not None and paths.exponential and testing.noise_enabled():  # noise off: the exact CDF answers
        chosen = paths.release(batch, batch.folded(paths.marginals(), arrays), rng)
    arrays.clear()  # the read's counts are consumed (measured): not held beside the answers while the results are built
    estimates = plan.kept_estimates(measurement) if session.settings.reuse and prepared.clip is None else None
    keeps = estimates is not None
    earlier = session.store.measurement_count(prepared.rows)
    if estimates is not None:
        session.store.record(prepared.rows, estimates)
    del estimates  # the store holds them in its own form; a batch's worth of arrays is freed before the answers are made
    covered = session.store.covered(prepared.rows, batch.workload) if keeps else ()
    everything = range(len(batch.workload.products))
    from_store = tuple(i for i in everything if i in kept or (keeps and covered[i]))
    found = {}
    if len(from_store) < len(everything):  # the plan's own GLS, for what the store does not answer
        fresh = plan.answer(measurement)
        found = {index: (fresh.values[i], fresh.variances[i]) for i, index in enumerate(measured)}
    if from_store:
        found.update(session.store.answer(prepared.rows, batch.workload, from_store))
    gls = Answers(tuple(found[i][0] for i in everything), tuple(found[i][1] for i in everything))
    answers, note = _finished(session, prepared, gls, plan, measurement, from_store=len(from_store) == len(everything), batch=batch)
    del measurement, found, gls  # the answers are all the results need
    combined = bool(kept) or (keeps and earlier > 0 and bool(from_store))
    released_clip = () if prepared.clip is None or clip is None else prepared.clip.released(clip)  # type: ignore[arg-type]
    outcome = Outcome("combined" if combined else "measured", note=note, clip=released_clip)
    variances_of = plan.variances_of if not from_store else None  # the plan's covariances hold for its own answers only
    return _with_explanation(session, prepared, batch.results(answers.values, answers.variances, variances_of, chosen), outcome)


def _measured_at_chosen_bound(
    session: Session, prepared: Prepared, arrays: dict[tuple[str, ...], np.ndarray], rng: np.random.Generator
) -> list[ResultSet]:
    """Choose the bound from the levels' totals (R2T), then measure the rows it keeps (``dpsql.truncation``)."""
    chosen, batch = prepared.chosen, prepared.batch
    assert chosen is not None and batch.workload is not None and prepared.decision.plan is not None
    bound = chosen.bound(arrays, rng=rng, noise=testing.noise_enabled())
    plan = chosen.plan(batch.workload, bound)
    required = batch.folded(plan.required_marginals(), truncation.bounded_to(arrays, chosen.choice.truncations.index(bound)))
    measurement = plan.measure(required, rng=rng, noise=testing.noise_enabled())
    fresh = plan.answer(measurement)
    answers, note = _finished(session, prepared, fresh, plan, measurement, from_store=False, batch=batch)
    note = f"rows per unit chosen: {bound} ({chosen.describe()})" + (f"; {note}" if note else "")
    return _with_explanation(session, prepared, batch.results(answers.values, answers.variances, plan.variances_of), Outcome("measured", plan=plan, note=note))


def _zero_core_results(prepared: Prepared) -> list[ResultSet]:
    """Every planned statement's empty release (:func:`_empty_releases`; a composed request's in its statements' order)."""
    if not prepared.parts:
        return _empty_releases(prepared)
    found: list[ResultSet | None] = [None] * len(prepared.request.statements)
    for part in prepared.parts:
        for index, result in zip(part.statements, _empty_releases(part.prepared)):
            found[index] = result
    return [result for result in found if result is not None]


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
