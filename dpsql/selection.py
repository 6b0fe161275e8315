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
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

import planner
from dpsql import keys, testing
from dpsql.accountant import Cost
from dpsql.errors import Error, NotSupportedError, ProgrammingError
from dpsql.request import Prepared, Selection
from dpsql.session import Session, Table
from dpsql.sql.bounded import KeyHistogram
from dpsql.workloads import CompiledBatch, compile_batch
from planner import (
    Answers,
    Domain,
    Identity,
    KeyedRelease,
    NoiseParameterError,
    PartitionSelectionImpossibleError,
    Product,
    Workload,
    design_keyed_release,
    discrete_gaussian,
    discrete_laplace,
    marginal_for,
    row_norms2,
    row_norms2_over,
    selected_errors,
    split,
)

MAX_KEYED_OTHER_CELLS = 1 << 16  # a statement selecting keys reads every (key, other cells) count


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


def design(session: Session, table: Table, batch: CompiledBatch, column: str, privacy: planner.Privacy, delta: float | None = None) -> Selection:
    """The statement's selection (module doc), checked to be runnable for any data: nothing read. ``delta``: the
    δ it may spend (None: the connection's ``selection_delta``)."""
    delta = session.selection_delta() if delta is None else delta
    workload = batch.workload
    assert workload is not None
    others = Domain(
        {a: s for a, s in zip(workload.domain.attributes, workload.domain.sizes) if a != column},
        ordered=[a for a in workload.domain.ordered if a != column],
    )
    if others.size > MAX_KEYED_OTHER_CELLS:
        raise NotSupportedError(too_many_cells(column))
    bounds = keys.KeyBounds.of(table.schema)
    try:
        thresholded = _thresholded(session, table, workload, column, others, privacy, bounds, delta)
        if thresholded is not None:
            return Selection(column, bounds, None, thresholded)
        chosen = split(privacy, delta, bounds.max_groups_per_unit, table.schema.contributions, False)
    except PartitionSelectionImpossibleError as error:
        raise ProgrammingError(f"GROUP BY {column!r}: {error}") from error
    except NoiseParameterError as error:
        raise ProgrammingError(f"the statement's budget is too small to add exact noise ({error}); use a larger budget") from error
    except ValueError as error:
        raise ProgrammingError(f"GROUP BY {column!r}: cannot design partition selection: {error}") from error
    try:  # the fallback for counting over any released keys: its noise depends on the budget alone
        planner.identity_plan(workload, chosen.count_privacy, table.schema.contributions)  # type: ignore[arg-type]
    except NoiseParameterError as error:
        raise ProgrammingError(f"the statement's counting budget is too small to add exact noise ({error}); use a larger budget") from error
    return Selection(column, bounds, chosen, None)


def _column_factor(product: Product, column: str) -> object:
    """The product's factor over ``column`` (None when it sums the column out)."""
    return next((f for f in product.factors if column in f.attributes), None)


def _without(product: Product, column: str, domain: Domain) -> Product:
    return Product(domain, tuple(f for f in product.factors if column not in f.attributes), product.weight)


def _thresholded(
    session: Session, table: Table, workload: Workload, column: str, others: Domain, privacy: planner.Privacy, bounds: keys.KeyBounds,
    delta: float,
) -> ThresholdedDesign | None:
    """The thresholded design when every product groups by the column alone or sums over it, else None."""
    per_key, totals = [], []
    for index, product in enumerate(workload.products):
        factor = _column_factor(product, column)
        if factor is None:
            totals.append(index)
        elif factor.attributes == (column,) and isinstance(factor.block, Identity):  # type: ignore[attr-defined]
            per_key.append(index)
        else:
            return None
    if not per_key:
        return None
    families = tuple((workload.products[i].weight, _mean_norm2(_without(workload.products[i], column, others), others)) for i in per_key)
    totals_workload = Workload(others, tuple(_without(workload.products[i], column, others) for i in totals)) if totals else None
    contributions = table.schema.contributions
    totals_error = None
    if totals_workload is not None:
        unit = planner.Privacy.laplace(1.0) if privacy.is_laplace else planner.Privacy.zcdp(1.0)
        at_unit = session.plan(totals_workload, unit, contributions)
        weighted = sum(p.weight**2 * float(np.mean(v)) for p, v in zip(totals_workload.products, at_unit.query_variances()))

        def totals_error(share: planner.Privacy) -> float:  # variances scale as 1/ε² (1/ρ): for choosing the split
            return weighted / (float(share.epsilon) ** 2 if share.is_laplace else float(share.rho))

    release = design_keyed_release(
        privacy, delta, bounds.max_groups_per_unit, bounds.max_rows_per_group,
        min(bounds.max_rows_per_unit, bounds.max_groups_per_unit * bounds.max_rows_per_group), others.size, families, totals_error,
    )
    totals_plan = None
    if totals_workload is not None:
        assert release.totals_privacy is not None
        totals_plan = session.plan(totals_workload, release.totals_privacy, contributions)
    return ThresholdedDesign(release, tuple(per_key), tuple(totals), others, totals_plan)


def _mean_norm2(product: Product, domain: Domain) -> float:
    """Mean squared norm of the product's rows over the cells of ``domain`` (summed-out attributes count)."""
    spread = math.prod(domain.size_of(a) for a in domain.attributes if a not in product.attributes)
    norms = [float(np.mean(row_norms2(f.block))) for f in product.factors]
    return spread * math.prod(norms)


def cost(selection: Selection) -> Cost:
    """The ledger charge of a selecting statement."""
    if selection.thresholded is not None:
        release = selection.thresholded.release
        if release.privacy.is_laplace:
            epsilon = float(release.privacy.epsilon)
            return Cost("laplace", epsilon**2 / 2, epsilon, 0.0, release.delta)
        return Cost("gaussian", float(release.privacy.rho), None, 0.0, release.delta)
    chosen = selection.split
    assert chosen is not None
    parts = (float(chosen.primitive.epsilon), float(chosen.primitive.delta))
    count = chosen.count_privacy
    assert count is not None
    if count.is_laplace:
        return Cost("laplace", float(count.epsilon) ** 2 / 2, float(count.epsilon), *parts)
    return Cost("gaussian", float(count.rho), None, *parts)


# ---------------------------------------------------------------------------------------------------
# release (the statement is charged; nothing here may fail on the data)
# ---------------------------------------------------------------------------------------------------


def release(session: Session, prepared: Prepared, histogram: KeyHistogram) -> Released:
    selection = prepared.selection
    assert selection is not None and prepared.keyed is not None
    if selection.thresholded is not None:
        return _release_thresholded(session, prepared, selection.thresholded, histogram)
    chosen = selection.split
    assert chosen is not None
    picked = keys.select_keys(histogram, chosen.primitive, testing.random_source())
    _remember(session, prepared, picked.keys)
    batch = recompiled(prepared, picked.keys)
    if batch.workload is None or _nothing_to_count(batch, prepared.keyed, picked.keys):
        return Released(batch, None, len(picked.keys), None)
    domain = keys.keys_domain(prepared.keyed, picked.keys)
    full = _full_table(histogram, domain, batch.workload.domain, prepared.keyed)
    plan = _counting_plan(session, batch.workload, chosen.count_privacy, prepared.contributions)  # type: ignore[arg-type]
    required = {m: marginal_for(batch.workload.domain, {batch.workload.domain.attributes: full}, m) for m in plan.required_marginals()}
    measurement = plan.measure(required, rng=testing.random_source(), noise=testing.noise_enabled())
    return Released(batch, plan.answer(measurement), len(picked.keys), plan)


def _selected_variances(rule: KeyedRelease, workload: Workload, product: Product, full: np.ndarray, axis: int, values: np.ndarray) -> np.ndarray:
    """Per row of a per-key product, the variance whose normal interval holds the row's confidence set given
    that its key was released (``planner.selected_errors``); rows that are not plain sums of a key's cells
    keep the noise variance. Every row lies within one key (the product is Identity on the key column), so
    the key's noisy total per row is the row's answer over a table holding each key's total in every cell,
    divided by the row's cell count (its answer over ones)."""
    def answer(table: np.ndarray) -> np.ndarray:
        return product.unweighted_answer(marginal_for(workload.domain, {workload.domain.attributes: table}, product.attributes))

    cells = answer(np.ones_like(full))
    totals = answer(np.broadcast_to(full.sum(axis=tuple(a for a in range(full.ndim) if a != axis), keepdims=True), full.shape))
    norms = row_norms2_over(product, workload.domain.attributes)
    plain = np.isclose(norms, cells)  # 0/1 rows: a sum of cells
    key_totals = np.divide(totals, cells, out=np.zeros_like(totals, dtype=float), where=cells > 0)
    errors = selected_errors(rule, values, np.where(plain, cells, 0), key_totals)
    return np.where(plain, errors**2, rule.cell_variance * norms)


def _remember(session: Session, prepared: Prepared, released: tuple[object, ...]) -> None:
    if released:  # an empty key set is not cached: a later statement selects afresh
        session.keys.put(prepared.table, prepared.keyed, released)  # type: ignore[arg-type]


def _nothing_to_count(batch: CompiledBatch, column: str, released: tuple[object, ...]) -> bool:
    """No key released and every branch groups by the column: no row at all."""
    return not released and all(column in b.group_columns for s in batch.statements for b in s.branches)


def recompiled(prepared: Prepared, released: tuple[object, ...]) -> CompiledBatch:
    """The request compiled over the released keys (it compiled over the stand-in key, so it compiles)."""
    column = prepared.keyed
    assert column is not None
    schema = prepared.table.schema
    schema = dataclasses.replace(schema, columns=tuple(c for c in schema.columns if c.name != column) + (keys.keys_domain(column, released),))
    request = prepared.request
    return compile_batch(
        request.statements, request.weights, schema, tuple(prepared.table.column_types), row_limit=math.inf,
        excluded_cells=prepared.batch.excluded_cells,
    )


def _full_table(histogram: KeyHistogram, domain: object, workload_domain: Domain, column: str) -> np.ndarray:
    """The count table over the workload's attributes, the column's cells on its axis."""
    return np.moveaxis(keys.table_over_keys(histogram, domain), 0, workload_domain.attributes.index(column))  # type: ignore[arg-type]


def _counting_plan(session: Session, workload: Workload, privacy: planner.Privacy, contributions: int) -> planner.Plan:
    """The planner's best plan for counting over the released keys, or — should it fail for this key
    count — the summed identity, which ``design`` checked can be built for any key count."""
    try:
        return session.plan(workload, privacy, contributions)
    except Error:
        return planner.identity_plan(workload, privacy, contributions)


def _release_thresholded(session: Session, prepared: Prepared, chosen: ThresholdedDesign, histogram: KeyHistogram) -> Released:
    """Noisy cells for every present key, keys released by their noisy totals, the totals by their plan."""
    column, rule = prepared.keyed, chosen.release
    assert column is not None
    cells = histogram.counts.reshape(len(histogram.keys), -1)
    noise = np.zeros(cells.shape, dtype=np.int64)
    if testing.noise_enabled():
        draw = discrete_laplace if rule.key_privacy.is_laplace else discrete_gaussian
        noise = np.asarray(draw(rule.noise_parameter, size=cells.shape, rng=testing.random_source()), dtype=np.int64).reshape(cells.shape)
    noisy = cells + noise
    kept = noisy.sum(axis=1) >= rule.threshold
    released = tuple(k for k, keep in zip(histogram.keys, kept) if keep)
    _remember(session, prepared, released)
    batch = recompiled(prepared, released)
    if batch.workload is None or _nothing_to_count(batch, column, released):
        return Released(batch, None, len(released), None)
    workload = batch.workload
    domain = keys.keys_domain(column, released)
    per_key_table = np.zeros((domain.size, *chosen.others.sizes))
    cell_of = {label: cell for cell, label in enumerate(domain.labels()[: domain.size - 1])}
    for key, values, keep in zip(histogram.keys, noisy, kept):
        if keep:
            per_key_table[cell_of[key]] = values.reshape(chosen.others.sizes)
    full = np.moveaxis(per_key_table, 0, workload.domain.attributes.index(column))
    values: dict[int, np.ndarray] = {}
    variances: dict[int, np.ndarray] = {}
    for index in chosen.per_key:
        product = workload.products[index]
        values[index] = product.unweighted_answer(marginal_for(workload.domain, {workload.domain.attributes: full}, product.attributes))
        variances[index] = _selected_variances(rule, workload, product, full, workload.domain.attributes.index(column), values[index])
    if chosen.totals_plan is not None:
        exact = keys.table_over_keys(histogram, domain).sum(axis=0)  # every row: the keys and the remainder
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
    return Released(batch, Answers(tuple(values[i] for i in everything), tuple(variances[i] for i in everything)), len(released), None)
