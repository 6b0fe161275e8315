"""The selection stage of the pipeline: a statement that groups by a column with no declared domain.

``design`` (in prepare, nothing read) chooses how the statement selects its keys; ``release`` (after the
one read, the statement already charged) selects them and answers the statement over them. Two designs:

* **Thresholded measurement** (``planner.design_keyed_release``), whenever every query either groups by the
  column or sums over all of it (GROUP BY, CUBE, ROLLUP, GROUPING SETS, UNION ALL, batches): every present
  key's cells are measured with noise, the keys whose noisy total reaches a threshold are released with
  those very counts — selection costs only its δ — and the queries over all keys (``(sex)``, ``()``) are
  measured on the whole table by a plan of their own, so they count every row. The released cells and the
  totals are consistent: the hidden remainder (rows of keys not released) takes the difference.
* **Split** (``planner.selection_split``), otherwise (``COUNT(column)`` or other predicates on the column):
  a share of the budget selects keys from their distinct units (``planner.partition``), and the rest
  counts the statement over the released keys with the planner's plan for them — or, should that plan
  fail for the number of keys released, the summed identity, which prepare checked can always be built.

**Several columns without declared domain.** When none of them has released keys and every query groups by each
of them or sums over it (GROUP BY, CUBE, ROLLUP, GROUPING SETS), they are selected in stages
(``planner.staged_selection``, :func:`_release_staged`): each column's keys from its noisy totals, then the column
whose released keys hold the fewest rows over the others' released keys, now public and cached — by the
one-column design below, its subtotals and the grand total measured over the public keys. Where a column to be
public released no key and every query groups by all of them or by none, the second stage selects key tuples
instead (the read bounds tuples per unit) by the thresholded design; the cells of the product of the columns'
released parts that are not released tuples are marked unreleased and never shown (:func:`recompiled`), and each
column's parts are cached as its keys. A query over one of them otherwise (``COUNT(column)``, a predicate) is
refused in prepare (:func:`check_joint`). When all but one have released keys, those are public domains
(``Prepared.public``) and the remaining column is selected over them by the one-column design, each of its keys
counting up to ``min(m, k·r)`` rows of a unit (:func:`keys.per_selected_key` turns the read's tuples into that
column's keys). SUM/AVG/VARIANCE/STDDEV in a statement selecting one column's keys take the split design: their
moment cells weigh up to ``R^p`` per row, beyond the thresholded design's per-row bound.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import planner
from dpsql import keys, testing
from dpsql.accountant import Cost
from dpsql.costs import cost_of
from dpsql.errors import Error, NotSupportedError, ProgrammingError
from dpsql.keys import KeySet
from dpsql.request import Prepared, Selection
from dpsql.session import Session, Table
from dpsql.sql.bounded import Key, KeyHistogram, key_order, sorted_keys
from dpsql.workloads import CompiledBatch, compile_batch
from planner import (
    Answers,
    Domain,
    Identity,
    KeyedRelease,
    NoiseParameterError,
    PartitionSelectionImpossibleError,
    Product,
    StagedSelection,
    Workload,
    design_keyed_release,
    design_staged_selection,
    marginal_for,
    selected_variances,
    split,
)

MAX_KEYED_OTHER_CELLS = 1 << 16  # a statement selecting keys reads every (key, other cells) count
MAX_JOINT_CELLS = 1 << 22  # cells over the product of jointly selected columns' released keys (and the other attributes)
MAX_STAGED_CELLS = 1 << 12  # cells of a key in the second stage (every key's are read densely): the first stage's keys cut to fit


@dataclass(frozen=True)
class ThresholdedDesign:
    """The thresholded-measurement design: the release parameters, which products are per key and which
    over all keys, and the plan for the latter over the other attributes ``X``."""

    release: KeyedRelease
    per_key: tuple[int, ...]  # products that group by the column (Identity on it)
    totals: tuple[int, ...]  # products that sum over it
    others: Domain  # X: the other attributes of the workload
    totals_plan: planner.Plan | None


@dataclass(frozen=True)
class Released:
    """What release made of the read: the batch over the released keys, its answers, how many keys, and
    the counting plan to report (None for the thresholded design, which reports its totals plan)."""

    batch: CompiledBatch
    answers: Answers | None  # None: nothing to count (no key released and every query groups by the column)
    released: int
    plan: planner.Plan | None


def too_many_cells(column: str) -> str:
    return (
        f"GROUP BY {column!r}: a statement grouping by a column without declared domain reads every (key, other cells) "
        f"count, and the other columns here span more than {MAX_KEYED_OTHER_CELLS} cells; group by fewer or coarser columns"
    )


# ---------------------------------------------------------------------------------------------------
# prepare
# ---------------------------------------------------------------------------------------------------


def design(
    session: Session, table: Table, batch: CompiledBatch, columns: tuple[str, ...], privacy: planner.Privacy, delta: float | None = None,
    public: bool = False,
) -> Selection:
    """The statement's selection (module doc), checked to be runnable for any data: nothing read. ``columns``: the
    columns whose keys it selects (several: jointly, as tuples); ``delta``: the δ it may spend (None: the
    connection's ``selection_delta``); ``public``: other columns without declared domain take part with their
    released key sets (the read bounds tuples of all of them: up to ``min(m, k·r)`` rows of a unit under one
    selected key)."""
    delta = session.selection_delta() if delta is None else delta
    workload = batch.workload
    assert workload is not None
    column = columns[0]
    named = ", ".join(columns)
    others = Domain(
        {a: s for a, s in zip(workload.domain.attributes, workload.domain.sizes) if a not in columns},
        ordered=[a for a in workload.domain.ordered if a not in columns],
    )
    if others.size > MAX_KEYED_OTHER_CELLS:
        raise NotSupportedError(too_many_cells(named))
    bounds = keys.KeyBounds.of(table.schema)
    if public:
        bounds = dataclasses.replace(bounds, max_rows_per_group=min(bounds.max_rows_per_unit, bounds.max_groups_per_unit * bounds.max_rows_per_group))
    moments = batch.encoding is not None  # a moment cell weighs up to ``scale`` per row: only the split measures it
    if batch.distinct is not None:  # prepare's refusals left one column grouped alone
        return Selection(column, bounds, None, _distinct_units(workload, batch.distinct.contributions, privacy, delta, bounds))
    try:
        staged = _staged(session, table, workload, columns, others, privacy, delta, bounds) if not public and not moments else None
        if staged is not None:
            return Selection(column, bounds, None, None, staged)
        thresholded = None if moments else _thresholded(session, table, workload, columns, others, privacy, bounds, delta)
        if thresholded is not None:
            return Selection(column, bounds, None, thresholded)
        if public:
            raise NotSupportedError(
                f"GROUP BY {named}: its keys are selected over other columns' released keys only for COUNT(*) and "
                f"aggregates that group by {named} or sum over it; select {named}'s keys in a statement of their own first"
            )
        if len(columns) > 1:
            raise NotSupportedError(joint_refusal(columns))
        chosen = split(privacy, delta, bounds.max_groups_per_unit, table.schema.contributions, False)
    except PartitionSelectionImpossibleError as error:
        raise ProgrammingError(f"GROUP BY {named}: {error}") from error
    except NoiseParameterError as error:
        raise ProgrammingError(f"the statement's budget is too small to add exact noise ({error}); use a larger budget") from error
    except ValueError as error:
        raise ProgrammingError(f"GROUP BY {named}: cannot design partition selection: {error}") from error
    try:  # the fallback for counting over any released keys: its noise depends on the budget alone
        planner.identity_plan(workload, chosen.count_privacy, table.schema.contributions * batch.scale)  # type: ignore[arg-type]
    except NoiseParameterError as error:
        raise ProgrammingError(f"the statement's counting budget is too small to add exact noise ({error}); use a larger budget") from error
    return Selection(column, bounds, chosen, None)


def joint_refusal(columns: tuple[str, ...]) -> str:
    return (
        f"GROUP BY: columns {list(columns)} have no declared domain; their keys are selected in one statement for "
        "queries that group by each of them or sum over it (GROUP BY, CUBE, ROLLUP, GROUPING SETS; subtotals over some of "
        "them need a δ large enough to select in stages): COUNT of one of them, or a predicate on it, needs its keys "
        f"released first — run GROUP BY {columns[0]} on its own first, or declare their domains"
    )


def check_joint(workload: Workload, columns: tuple[str, ...]) -> None:
    """Refuse, before the read, a statement selecting the keys of several columns whose queries do not each group
    by each of them or sum over it (module doc)."""
    if not all(_by_key_or_not(p, columns) for p in workload.products):
        raise NotSupportedError(joint_refusal(columns))


def _column_factor(product: Product, column: str) -> object:
    """The product's factor over ``column`` (None when it sums the column out)."""
    return next((f for f in product.factors if column in f.attributes), None)


def _key_kind(product: Product, columns: tuple[str, ...]) -> str:
    """How ``product`` uses the key columns: ``"all"`` (Identity on each alone: one row per key), ``"none"`` (it
    sums over them) or ``"other"``."""
    factors = [_column_factor(product, c) for c in columns]
    if all(f is None for f in factors):
        return "none"
    if all(f is not None and f.attributes == (c,) and isinstance(f.block, Identity) for f, c in zip(factors, columns)):  # type: ignore[attr-defined]
        return "all"
    return "other"


def _without(product: Product, columns: tuple[str, ...], domain: Domain) -> Product:
    return Product(domain, tuple(f for f in product.factors if not set(columns) & set(f.attributes)), product.weight)


@dataclass(frozen=True)
class StagedDesign:
    """Selection in stages (``planner.staged_selection``): the stages' budgets and thresholds, and — when every query
    groups by all the columns or by none — the thresholded design of the tuples the second stage falls back on when
    a column to be public released no key."""

    stages: StagedSelection
    tuples: ThresholdedDesign | None


def _by_key_or_not(product: Product, columns: tuple[str, ...]) -> bool:
    """Whether ``product`` groups by each key column alone (Identity on it) or sums over it."""
    for column in columns:
        factor = _column_factor(product, column)
        if factor is not None and (factor.attributes != (column,) or not isinstance(factor.block, Identity)):  # type: ignore[attr-defined]
            return False
    return True


def _staged(
    session: Session, table: Table, workload: Workload, columns: tuple[str, ...], others: Domain, privacy: planner.Privacy, delta: float,
    bounds: keys.KeyBounds,
) -> StagedDesign | None:
    """The staged design for several columns whose every query groups by each of them or sums over it (subtotals
    included); None otherwise, or when δ is too small to split over the stages."""
    if len(columns) < 2 or not all(_by_key_or_not(p, columns) for p in workload.products):
        return None
    sensitivity = min(bounds.max_rows_per_unit, bounds.max_groups_per_unit * bounds.max_rows_per_group)
    try:
        cells = max(MAX_STAGED_CELLS, others.size)  # the public keys' product is cut to this after the first stage
        stages = design_staged_selection(privacy, delta, len(columns), bounds.max_groups_per_unit, sensitivity, cells)
    except ValueError:
        return None
    return StagedDesign(stages, _thresholded(session, table, workload, columns, others, stages.second_privacy, bounds, stages.second_delta))


def _thresholded(
    session: Session, table: Table, workload: Workload, columns: tuple[str, ...], others: Domain, privacy: planner.Privacy,
    bounds: keys.KeyBounds, delta: float, plan: Callable[[Workload, planner.Privacy, int], planner.Plan] | None = None,
) -> ThresholdedDesign | None:
    """The thresholded design when every product groups by each key column alone (a key: one cell of each)
    or sums over all of them, else None; the queries over all keys planned by ``plan`` (the session's)."""
    plan = plan or session.plan
    per_key, totals = [], []
    for index, product in enumerate(workload.products):
        kind = _key_kind(product, columns)
        if kind == "none":
            totals.append(index)
        elif kind == "all":
            per_key.append(index)
        else:
            return None
    if not per_key:
        return None
    totals_workload = Workload(others, tuple(_without(workload.products[i], columns, others) for i in totals)) if totals else None
    contributions = table.schema.contributions
    totals_error = None
    if totals_workload is not None:
        unit = planner.Privacy.laplace(1.0) if privacy.is_laplace else planner.Privacy.zcdp(1.0)
        at_unit = plan(totals_workload, unit, contributions)
        weighted = sum(p.weight**2 * float(np.mean(v)) for p, v in zip(totals_workload.products, at_unit.query_variances()))

        def totals_error(share: planner.Privacy) -> float:  # variances scale as 1/ε² (1/ρ): for choosing the split
            return weighted / (float(share.epsilon) ** 2 if share.is_laplace else float(share.rho))

    release = design_keyed_release(
        privacy, delta, bounds.max_groups_per_unit, bounds.max_rows_per_group,
        min(bounds.max_rows_per_unit, bounds.max_groups_per_unit * bounds.max_rows_per_group), others,
        tuple(_without(workload.products[i], columns, others) for i in per_key), totals_error,
    )
    totals_plan = None
    if totals_workload is not None:
        assert release.totals_privacy is not None
        totals_plan = plan(totals_workload, release.totals_privacy, contributions)
    return ThresholdedDesign(release, tuple(per_key), tuple(totals), others, totals_plan)


def _distinct_units(workload: Workload, contributions: int, privacy: planner.Privacy, delta: float, bounds: keys.KeyBounds) -> ThresholdedDesign:
    """``SELECT browser, COUNT(DISTINCT unit) … GROUP BY browser``: each key's distinct units (the read counts them
    for every key) measured with noise and thresholded. Key bounding keeps at most ``k`` keys per unit, so a unit
    adds 1 to at most ``k`` keys' counts (L1 sensitivity ``contributions`` = min(k, m)), at most ``k`` new keys,
    each with 1 unit: the thresholded design with one cell per key and 1 row per key (docs/math.md §14)."""
    nothing = Domain({}, ordered=[])
    try:
        release = design_keyed_release(privacy, delta, bounds.max_groups_per_unit, 1, contributions, nothing, (), None)
    except NoiseParameterError as error:
        raise ProgrammingError(f"the statement's budget is too small to add exact noise ({error}); use a larger budget") from error
    except (ValueError, PartitionSelectionImpossibleError) as error:
        raise ProgrammingError(f"COUNT(DISTINCT) by keys to select: {error}") from error
    return ThresholdedDesign(release, tuple(range(len(workload.products))), (), nothing, None)


def cost(selection: Selection) -> Cost:
    """The ledger charge of a selecting statement: its measurement's privacy plus the selection's (ε, δ) part."""
    if isinstance(selection.staged, StagedDesign):
        return cost_of(selection.staged.stages.privacy, 0.0, selection.staged.stages.delta)
    if selection.thresholded is not None:
        release = selection.thresholded.release
        return cost_of(release.privacy, 0.0, release.delta)
    chosen = selection.split
    assert chosen is not None and chosen.count_privacy is not None
    return cost_of(chosen.count_privacy, chosen.primitive.epsilon, chosen.primitive.delta)


# ---------------------------------------------------------------------------------------------------
# release (the statement is charged; nothing here may fail on the data)
# ---------------------------------------------------------------------------------------------------


def release(session: Session, prepared: Prepared, histogram: KeyHistogram) -> Released:
    """Select keys from the read and answer the statement over them. Total: any histogram — no key at all
    included — gives an answer (with no key released, every query over all keys is still answered)."""
    selection = prepared.selection
    assert selection is not None and prepared.keyed is not None
    if prepared.public:  # the read's keys are tuples with the public columns' parts: their cells, per selected key
        histogram = keys.per_selected_key(histogram, len(prepared.key_columns), tuple(k for _, k in prepared.public), _public_axes(prepared))
    if isinstance(selection.staged, StagedDesign):
        return _release_staged(session, prepared, selection.staged, histogram)
    if prepared.batch.distinct is not None:
        histogram = keys.distinct_units(histogram)
    if selection.thresholded is not None:
        return _release_thresholded(session, prepared, selection.thresholded, histogram)
    chosen = selection.split
    assert chosen is not None
    released = _remember(session, prepared, keys.select_keys(histogram, chosen.primitive, testing.random_source()))
    batch = recompiled(prepared, released)
    if batch.workload is None or _nothing_to_count(batch, prepared.key_columns, released):
        return Released(batch, None, len(released[0]), None)
    full = keys.over_domain(keys.table_over_keys(histogram, released), prepared.key_columns, batch.workload.domain)
    plan = _counting_plan(session, batch.workload, chosen.count_privacy, prepared.contributions * batch.scale)  # type: ignore[arg-type]
    required = {m: marginal_for(batch.workload.domain, {batch.workload.domain.attributes: full}, m) for m in plan.required_marginals()}
    measurement = plan.measure(required, rng=testing.random_source(), noise=testing.noise_enabled())
    return Released(batch, plan.answer(measurement), len(released[0]), plan)


def _remember(session: Session, prepared: Prepared, released: tuple[Key, ...]) -> tuple[KeySet, ...]:
    """The released keys as one key set per key column (jointly selected columns: each column's parts of the
    released tuples), cached for later statements — for a column without a cached set (an empty set is
    not cached: a later statement selects afresh)."""
    columns = prepared.key_columns
    types = [prepared.table.column_types[c] for c in columns]
    sets = (KeySet.of(released, types[0]),) if len(columns) == 1 else keys.projections(released, types)  # type: ignore[arg-type]
    for column, key_set in zip(columns, sets):
        if len(key_set) and session.keys.get(prepared.table, column) is None:
            session.keys.put(prepared.table, column, key_set)
    return sets


def _public_axes(prepared: Prepared) -> tuple[int, ...]:
    """Where each public key column's axis goes among a selected key's cells (the other attributes of the
    workload, in domain order), the read's other columns following in that order."""
    assert prepared.batch.workload is not None
    others = [a for a in prepared.batch.workload.domain.attributes if a not in prepared.key_columns]
    return tuple(others.index(c) for c, _ in prepared.public)


def _nothing_to_count(batch: CompiledBatch, columns: tuple[str, ...], released: tuple[KeySet, ...]) -> bool:
    """No key released and every branch groups by a key column: no row at all."""
    return not len(released[0]) and all(set(columns) & set(b.group_columns) for s in batch.statements for b in s.branches)


def recompiled(prepared: Prepared, released: tuple[KeySet, ...], tuples: tuple[Key, ...] = ()) -> CompiledBatch:
    """The request compiled over the released keys (it compiled over the stand-in keys, so it compiles); for
    jointly selected columns, the cells of tuples that were not released (``tuples``: those that were) are
    marked unreleased in every branch grouping by them, never shown."""
    columns = prepared.key_columns
    schema = prepared.table.schema
    domains = tuple(k.domain(c) for k, c in zip(released, columns)) + tuple(k.domain(c) for c, k in prepared.public)
    columns += tuple(c for c, _ in prepared.public)
    schema = dataclasses.replace(schema, columns=tuple(c for c in schema.columns if c.name not in columns) + domains)
    request = prepared.request
    batch = compile_batch(
        request.statements, request.weights, schema, tuple(prepared.table.column_types), row_limit=math.inf,
        excluded_cells=prepared.batch.excluded_cells,
    )
    columns = prepared.key_columns
    if len(columns) == 1:
        return batch
    cells_of = [k.cells() for k in released]
    statements = []
    for statement in batch.statements:
        branches = []
        for branch in statement.branches:
            if set(columns) <= set(branch.group_columns):
                unreleased = np.ones(branch.group_shape, dtype=bool)
                positions = [branch.group_columns.index(c) for c in columns]
                for key in tuples:
                    at: list[object] = [slice(None)] * len(branch.group_shape)
                    for position, cells, part in zip(positions, cells_of, key):  # type: ignore[arg-type]
                        at[position] = cells[part]
                    unreleased[tuple(at)] = False
                branch = dataclasses.replace(branch, unreleased=unreleased)
            branches.append(branch)
        statements.append(dataclasses.replace(statement, branches=tuple(branches)))
    return dataclasses.replace(batch, statements=tuple(statements))


def _counting_plan(session: Session, workload: Workload, privacy: planner.Privacy, contributions: int) -> planner.Plan:
    """The planner's best plan for counting over the released keys, or — should it fail for this key
    count — the summed identity, which ``design`` checked can be built for any key count."""
    try:
        return session.plan(workload, privacy, contributions)
    except Error:
        return planner.identity_plan(workload, privacy, contributions)


def _within_product_limit(tuples: tuple[Key, ...], totals: np.ndarray, kept: np.ndarray, cells: int) -> np.ndarray:
    """Released tuples whose columns' key sets span at most :data:`MAX_JOINT_CELLS` cells with ``cells`` each:
    all of them, unless that product is larger — then the tuples of largest noisy totals that fit, added in
    that order (post-processing of the release: total, whatever the data)."""
    chosen = np.flatnonzero(kept)
    parts = [set() for _ in range(len(tuples[chosen[0]]) if len(chosen) else 0)]  # type: ignore[arg-type]
    for position in chosen:
        for part, value in zip(parts, tuples[position]):  # type: ignore[arg-type]
            part.add(value)
    if math.prod(len(p) + 1 for p in parts) * cells <= MAX_JOINT_CELLS:
        return kept
    within = np.zeros(len(kept), dtype=bool)
    parts = [set() for _ in parts]
    for position in sorted(chosen, key=lambda i: (-int(totals[i]), key_order(tuples[i]))):
        grown = [part | {value} for part, value in zip(parts, tuples[position])]  # type: ignore[arg-type]
        if math.prod(len(p) + 1 for p in grown) * cells <= MAX_JOINT_CELLS:
            parts, within[position] = grown, True
    return within


def _release_thresholded(session: Session, prepared: Prepared, chosen: ThresholdedDesign, histogram: KeyHistogram) -> Released:
    """Noisy cells for every present key, keys released by their noisy totals (``KeyedRelease.release``),
    the totals by their plan."""
    columns, rule = prepared.key_columns, chosen.release
    noisy, kept = rule.release(histogram.counts, rng=testing.random_source(), noise=testing.noise_enabled())
    if len(columns) > 1:
        kept = _within_product_limit(histogram.keys, noisy.sum(axis=1), kept, chosen.others.size)
    tuples = tuple(k for k, keep in zip(histogram.keys, kept) if keep)
    released = _remember(session, prepared, tuples)
    batch = recompiled(prepared, released, tuples)
    if batch.workload is None or _nothing_to_count(batch, columns, released):
        return Released(batch, None, len(tuples), None)
    workload = batch.workload
    per_key_table = np.zeros((*(len(k) + 1 for k in released), *chosen.others.sizes))
    cells_of = [k.cells() for k in released]
    for key, values, keep in zip(histogram.keys, noisy, kept):
        if keep:
            parts = key if isinstance(key, tuple) else (key,)
            per_key_table[tuple(c[p] for c, p in zip(cells_of, parts))] = values.reshape(chosen.others.sizes)
    full = keys.over_domain(per_key_table, columns, workload.domain)
    axes = tuple(workload.domain.attributes.index(c) for c in columns)
    values: dict[int, np.ndarray] = {}
    variances: dict[int, np.ndarray] = {}
    for index in chosen.per_key:
        product = workload.products[index]
        values[index] = product.unweighted_answer(marginal_for(workload.domain, {workload.domain.attributes: full}, product.attributes))
        variances[index] = selected_variances(rule, product, workload.domain, full, axes, values[index])
    if chosen.totals_plan is not None:
        exact = keys.table_over_keys(histogram, released).sum(axis=tuple(range(len(columns))))  # every row: the keys and the remainder
        plan = chosen.totals_plan
        required = {m: marginal_for(chosen.others, {chosen.others.attributes: exact}, m) for m in plan.required_marginals()}
        measurement = plan.measure(required, rng=testing.random_source(), noise=testing.noise_enabled())
        answered = plan.answer(measurement)
        for position, index in enumerate(chosen.totals):
            values[index], variances[index] = answered.values[position], answered.variances[position]
        estimates = plan.kept_estimates(measurement) if session.settings.reuse else None
        if estimates is not None:
            session.store.record(prepared.rows, estimates)
    everything = range(len(workload.products))
    return Released(batch, Answers(tuple(values[i] for i in everything), tuple(variances[i] for i in everything)), len(tuples), None)


def _release_staged(session: Session, prepared: Prepared, staged: StagedDesign, histogram: KeyHistogram) -> Released:
    """The staged design (``planner.staged_selection``): each column's keys released from their noisy totals, then
    the column whose released keys hold the fewest rows selected again over the others' released keys (public
    now, and cached), by the one-column thresholded design for its keys' number of cells — the queries summing over
    it measured over the public keys. Total: no key at all releases nothing and answers over nothing."""
    columns, rng, noise, stages = prepared.key_columns, testing.random_source(), testing.noise_enabled(), staged.stages
    first: list[tuple[tuple[str | None, ...], np.ndarray]] = []  # per column: its released keys, by noisy total (largest first)
    for position, rule in enumerate(stages.first):
        texts, totals = _column_totals(histogram, position)
        noisy, kept = rule.release(totals.reshape(-1, 1), rng=rng, noise=noise)
        order = sorted(np.flatnonzero(kept), key=lambda i: (-int(noisy[i, 0]), key_order(texts[i])))
        first.append((tuple(texts[i] for i in order), noisy[order, 0]))
    masses = [int(totals.sum()) for _, totals in first]
    selected = masses.index(min(masses))
    at = [i for i in range(len(columns)) if i != selected]
    if staged.tuples is not None and any(not first[i][0] for i in at):  # a column to be public released no key: tuples
        return _release_thresholded(session, prepared, staged.tuples, histogram)
    domain = prepared.batch.workload.domain  # type: ignore[union-attr]
    declared = math.prod(s for a, s in zip(domain.attributes, domain.sizes) if a not in columns)
    counts = _fitting([len(first[i][0]) for i in at], max(1, stages.max_cells // declared))
    types = prepared.table.column_types
    public = tuple((columns[i], KeySet.of(first[i][0][:n], types[columns[i]])) for i, n in zip(at, counts))
    for column, key_set in public:
        if len(key_set) and session.keys.get(prepared.table, column) is None:
            session.keys.put(prepared.table, column, key_set)
    stage = dataclasses.replace(prepared, keyed=columns[selected], joint=(), public=public)
    reordered = KeyHistogram(
        tuple((k[selected], *(k[i] for i in at)) for k in histogram.keys), histogram.units, histogram.counts, histogram.remainder  # type: ignore[index]
    )
    regrouped = keys.per_selected_key(reordered, 1, tuple(k for _, k in public), _public_axes(stage))
    workload = recompiled(stage, (_PLACEHOLDER_KEYS,)).workload  # over the public keys, the selected column's still to come
    assert workload is not None
    others = Domain(
        {a: s for a, s in zip(workload.domain.attributes, workload.domain.sizes) if a != stage.keyed},
        ordered=[a for a in workload.domain.ordered if a != stage.keyed],
    )
    # a unit adds at most k keys of the selected column and c = min(m, k·r) rows over all its cells: the stage's bounds
    bounds = keys.KeyBounds(stages.max_groups, stages.sensitivity, stages.sensitivity)
    design = _thresholded(
        session, prepared.table, workload, (stage.keyed,), others, stages.second_privacy, bounds, stages.second_delta,  # type: ignore[arg-type]
        lambda w, p, c: _counting_plan(session, w, p, c),
    )
    assert design is not None  # the selected column is grouped by in some query: it is a key column
    return _release_thresholded(session, stage, design, regrouped)


_PLACEHOLDER_KEYS = KeySet(("",), (keys.PLACEHOLDER_KEY,))  # a column's keys before they are selected (its placeholder domain)


def _column_totals(histogram: KeyHistogram, position: int) -> tuple[tuple[str | None, ...], np.ndarray]:
    """One column's keys (its parts of the read's key tuples, in key order) and each one's total of rows."""
    per_tuple = histogram.counts.reshape(len(histogram.keys), math.prod(histogram.counts.shape[1:])).sum(axis=1)  # no key: none
    totals: dict[str | None, int] = {}
    for key, count in zip(histogram.keys, per_tuple):
        part = key[position]  # type: ignore[index]
        totals[part] = totals.get(part, 0) + int(count)
    texts = sorted_keys(totals)
    return texts, np.array([totals[t] for t in texts], dtype=np.int64)


def _fitting(sizes: list[int], cells: int) -> list[int]:
    """How many keys each public column keeps so that their cells (each column's keys and its remainder) number
    at most ``cells``: the largest key set gives up its smallest keys first (post-processing: total)."""
    kept = list(sizes)
    while kept and math.prod(k + 1 for k in kept) > cells:
        largest = kept.index(max(kept))
        kept[largest] -= 1
    return kept
