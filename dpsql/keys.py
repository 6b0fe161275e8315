"""GROUP BY over a column with no public domain: select the keys privately, then count them
(MATH.md §6, issue 5).

``SELECT browser, COUNT(*) FROM logs GROUP BY browser`` with ``browser: unknown`` in the schema runs as:

1. **Bounding** (in SQL, :mod:`dpsql.sql.keyed`): each unit keeps at most ``max_groups_per_unit = k``
   keys (a random choice per unit with a fresh salt per statement), at most ``max_rows_per_group = r``
   rows per key, and at most ``max_rows_per_unit = m`` rows in all. A unit then changes the counts by
   at most ``c = min(m, k·r)`` in L1 norm and touches at most ``k`` keys.
2. **One pass**: the database returns, over the same bounded rows, the number of distinct units per
   key and the count table of every key over the statement's other (declared) columns.
3. **Selection**: the key set is chosen by the primitive :func:`planner.partition.choose` picks for
   ``(ε_sel, δ, k)`` (the optimal primitive; for ``k > 1`` the split optimal primitive or Gaussian
   thresholding, whichever has the lower midpoint), or by Laplace / Gaussian thresholding whose noisy
   unit count is itself released as the count (allowed when it equals the row count: ``r = 1``, a
   single GROUP BY column, only ``COUNT(*)``). Unit counts stop mattering at the ``n`` where the keep
   probability reaches 1: they are clipped there. Only keys present in the bounded rows can be kept.
4. **Counting**: the released keys become the column's (now public) categories; the statement is
   compiled and planned as an ordinary workload (a mixed GROUP BY of the unknown and declared
   columns included) and measured with the rest of the budget, at sensitivity ``c``.
5. **Charge, then release**: the ledger is charged the whole statement — an (ε_sel, δ) part
   composed by addition (``dpsql.accountant``) plus the counting part — before any key or count
   leaves the engine; nothing is charged when anything fails earlier. The released key set is then
   cached on the connection (per table, column and bounds): later statements over that column are
   answered over those keys as a public domain and pay for counting only (post-processing), WHERE
   conditions on the column included; every other statement (GROUPING SETS / CUBE / ROLLUP / UNION ALL,
   ``connection.workload``, ``executemany``, a COUNT or WHERE on the column) uses it too, through
   :func:`schema_with_released_keys`, but only a plain GROUP BY on the column selects keys.

**The split.** The statement's budget (ε, or ρ with Gaussian noise) is split into a fraction ``f`` for
selection and ``1 − f`` for counting. ``f`` is chosen on a grid (:data:`SELECTION_FRACTIONS`), and
against the thresholding primitive that reuses its noisy count (``f = 1``; Laplace thresholding with
Laplace noise, Gaussian thresholding with Gaussian noise), to minimise the data-independent objective

    max over n ≥ 1 of  π_f(n) · V_f + (1 − π_f(n)) · n²,

the worst expected squared error of one key with ``n`` units (and ``n`` rows) over all ``n``: a kept key
errs by its count's noise variance ``V_f``, a dropped key by its whole count (it reads as 0). It
balances a late selection midpoint (large ``f`` needed) against noisy counts (small ``f`` needed). The
grid is searched with the split optimal primitive (closed form); at the best ``f``,
:func:`planner.partition.choose` may swap in Gaussian thresholding (``k > 1``, lower midpoint). For
a thresholding primitive whose noisy count is released, ``π(n)·V`` is replaced by the exact
``E[Z²; kept]``, which includes the selection bias (keys are kept when their noise is high). With
Gaussian noise, a fraction ``f`` of ρ buys selection at ``ε_sel = √(2fρ)`` (the ε of a pure mechanism
costing ``fρ`` in zCDP).

**δ.** Selection needs δ > 0 (pure ε-DP admits no selection). Each selection spends
``connection.selection_delta``, by default :data:`DEFAULT_SELECTION_DELTA_SHARE` of the budget's δ.

**What is released.** The rows of the released keys (and EXPLAIN text saying how many keys were
released); the number of keys considered is private and is withheld.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

import planner
from dpsql import explain, testing
from dpsql.accountant import Cost
from dpsql.errors import InternalError, NotSupportedError, ProgrammingError
from dpsql.result import Result, build_result
from dpsql.schema import ColumnDomain, Schema
from dpsql.sql.bounded import is_numeric_type
from dpsql.sql.compile import CompiledQuery, compile_query
from dpsql.sql.keyed import KeyBoundedAggregation, KeyHistogram
from dpsql.sql.parse import Count, Query, parse, predicate_columns
from planner.noise import discrete_gaussian_variance, discrete_laplace_variance
from planner.partition import (
    PartitionSelection,
    PartitionSelectionImpossibleError,
    choose,
    gaussian_threshold,
    laplace_threshold,
    optimal,
    require_selection_possible,
)

if TYPE_CHECKING:
    from dpsql.connection import Connection, Table

SELECTION_FRACTIONS = tuple(round(0.05 * i, 2) for i in range(1, 20))  # 0.05, 0.10, …, 0.95
DEFAULT_SELECTION_DELTA_SHARE = 0.1  # of the budget's δ, spent by one selection unless configured
_ALWAYS_KEPT_PROBABILITY = 1 - 1e-9  # where the objective's search over n stops for thresholding
_KEY_TYPES = ("VARCHAR", "TEXT", "STRING", "CHAR", "BOOLEAN")  # besides numeric types


# ---------------------------------------------------------------------------------------------------
# Bounds and the split between selection and counting.
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyBounds:
    """What one unit may contribute to a GROUP BY on an unknown column."""

    max_groups_per_unit: int  # k
    max_rows_per_group: int  # r
    max_rows_per_unit: int  # m

    @classmethod
    def of(cls, schema: Schema) -> KeyBounds:
        rows_per_group = schema.max_rows_per_group or schema.max_rows_per_unit
        return cls(schema.max_groups_per_unit, rows_per_group, schema.max_rows_per_unit)

    @property
    def contributions(self) -> int:
        """L1 sensitivity of the counts: ``min(m, k·r)``."""
        return min(self.max_rows_per_unit, self.max_groups_per_unit * self.max_rows_per_group)

    def describe(self) -> str:
        return (
            f"at most {self.max_groups_per_unit} key(s) per unit (random), {self.max_rows_per_group} row(s) per unit "
            f"and key, {self.max_rows_per_unit} row(s) per unit: counts change by at most {self.contributions} per unit"
        )


@dataclass(frozen=True)
class SelectionDesign:
    """How one statement's budget is spent: the primitive, the selection share and the counting privacy."""

    primitive: PartitionSelection
    fraction: float  # share of the statement's budget spent on selection (1 when the noisy count is reused)
    count_privacy: planner.Privacy | None  # None when the primitive's noisy count is released
    count_variance: float  # noise variance of one released count (V in the objective)
    objective: float  # max_n π(n)·V + (1 − π(n))·n² of this design

    @property
    def reuses_noisy_count(self) -> bool:
        return self.count_privacy is None

    def cost(self) -> Cost:
        """The ledger charge: the selection as an (ε, δ) part, the counting as pure ε or zCDP."""
        selection = (self.primitive.epsilon, self.primitive.delta)
        if self.count_privacy is None:
            return Cost("laplace", 0.0, 0.0, *selection)
        if self.count_privacy.is_laplace:
            epsilon = float(self.count_privacy.epsilon)
            return Cost("laplace", epsilon**2 / 2, epsilon, *selection)
        return Cost("gaussian", float(self.count_privacy.rho), None, *selection)

    def describe(self) -> str:
        if self.reuses_noisy_count:
            counting = "the thresholded noisy unit count is released as the count (no separate counting)"
        else:
            counting = f"counts measured under {self.count_privacy}"
        return (
            f"{self.fraction:.0%} of the statement's budget to selection, {counting}; per-count noise variance "
            f"{self.count_variance:.4g}; worst expected squared error of one key (dropped keys count as 0) "
            f"{self.objective:.4g}, the least over the candidate splits"
        )


def worst_key_error(primitive: PartitionSelection, variance: float | None) -> float:
    """``max over n ≥ 1 of π(n)·V + (1 − π(n))·n²``: the objective the split minimises. With
    ``variance=None`` the primitive's own noisy count is released: ``π(n)·V`` is then the exact
    ``E[Z²; kept]`` of a thresholding primitive (its selection bias included)."""
    always = primitive.always_kept()
    limit = always if math.isfinite(always) else primitive.n_reaching(_ALWAYS_KEPT_PROBABILITY)
    n = np.arange(1, max(1, math.ceil(limit)) + 1)
    keep = np.asarray(primitive.probability_of_keep(n), dtype=float)
    if variance is None:
        kept_error = np.asarray(primitive.kept_squared_error(n), dtype=float)  # type: ignore[attr-defined]
    else:
        kept_error = keep * variance
    return float(np.max(kept_error + (1 - keep) * n.astype(float) ** 2))


def _count_variance(privacy: planner.Privacy, contributions: int) -> float:
    if privacy.is_laplace:
        return float(discrete_laplace_variance(contributions / privacy.epsilon))
    return float(discrete_gaussian_variance(contributions**2 / (2 * privacy.rho)))


@lru_cache(maxsize=128)
def design(family: str, budget: float, delta: float, bounds: KeyBounds, reuse_allowed: bool) -> SelectionDesign:
    """The split with the least :func:`worst_key_error`. ``budget`` is the statement's ε (``family``
    "laplace") or ρ ("gaussian"). Raises :class:`PartitionSelectionImpossibleError` when δ = 0."""
    require_selection_possible(delta)
    k, contributions = bounds.max_groups_per_unit, bounds.contributions

    def selection_epsilon(fraction: float) -> float:
        return budget * fraction if family == "laplace" else math.sqrt(2 * fraction * budget)

    def measured(fraction: float, primitive: PartitionSelection) -> SelectionDesign:
        rest = budget * (1 - fraction)
        count_privacy = planner.Privacy.laplace(rest) if family == "laplace" else planner.Privacy.zcdp(rest)
        variance = _count_variance(count_privacy, contributions)
        return SelectionDesign(primitive, fraction, count_privacy, variance, worst_key_error(primitive, variance))

    # the grid is searched with the split optimal primitive (closed form, fast); at the best fraction,
    # choose() swaps in Gaussian thresholding when k > 1 and its midpoint is lower
    grid = [measured(f, optimal(selection_epsilon(f), delta, k)) for f in SELECTION_FRACTIONS]
    best = min(grid, key=lambda candidate: candidate.objective).fraction
    candidates = [measured(best, choose(selection_epsilon(best), delta, k))]
    if reuse_allowed:
        thresholding = (laplace_threshold if family == "laplace" else gaussian_threshold)(selection_epsilon(1.0), delta, k)
        scale = float(thresholding.noise_scale)
        variance = float(discrete_laplace_variance(scale) if family == "laplace" else discrete_gaussian_variance(scale**2))
        candidates.append(SelectionDesign(thresholding, 1.0, None, variance, worst_key_error(thresholding, None)))
    return min(candidates, key=lambda candidate: candidate.objective)


# ---------------------------------------------------------------------------------------------------
# The connection's cache of released key sets.
# ---------------------------------------------------------------------------------------------------


class ReleasedKeys:
    """Key sets released on one connection, per (table, column, bounds). Re-using one is
    post-processing: it costs nothing. An entry belongs to the registered table object it was
    released from, so re-registering the table (new data) makes it unused."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, KeyBounds], tuple[Table, tuple[object, ...]]] = {}

    def get(self, table: Table, column: str, bounds: KeyBounds) -> tuple[object, ...] | None:
        found = self._entries.get((table.name.lower(), column, bounds))
        return found[1] if found is not None and found[0] is table else None

    def put(self, table: Table, column: str, bounds: KeyBounds, keys: tuple[object, ...]) -> None:
        self._entries[(table.name.lower(), column, bounds)] = (table, keys)


def released_domain(column: str, keys: tuple[object, ...]) -> ColumnDomain:
    """The released keys as the column's categories (sorted; NULL as the nullable cell)."""
    values = tuple(sorted((k for k in keys if k is not None), key=lambda v: (str(type(v)), v)))  # type: ignore[arg-type]
    return ColumnDomain(column, "categories", values, nullable=None in keys)


def schema_with_released_keys(connection: Connection, table: Table) -> Schema:
    """``table``'s schema with every unknown column whose key set was released on ``connection`` (under
    the schema's bounds) declared as those keys: how every other statement reads such a column
    afterwards, as post-processing of the release."""
    schema, bounds = table.schema, KeyBounds.of(table.schema)
    for column in table.column_types:
        cached = None if schema.column(column).is_known else connection._released_keys.get(table, column, bounds)
        if cached:
            schema = _with_domain(schema, released_domain(column, cached))
    return schema


def _with_domain(schema: Schema, domain: ColumnDomain) -> Schema:
    columns = tuple(c for c in schema.columns if c.name != domain.name) + (domain,)
    return dataclasses.replace(schema, columns=columns)


# ---------------------------------------------------------------------------------------------------
# Preparing a statement (no data read).
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyedStatement:
    """A statement grouping by one unknown column, compiled and priced, that has not read data yet."""

    operation: str
    query: Query
    table: Table
    column: str  # the unknown column, spelled as in the table
    bounds: KeyBounds
    compiled: CompiledQuery  # over the cached keys, or over a one-key placeholder domain before selection
    cost: Cost  # what executing it charges (nothing when compiled.workload is None)
    design: SelectionDesign | None  # None when the cached key set is used
    cached_keys: tuple[object, ...] | None
    count_plan: planner.Plan | None  # the counting plan when the key set is already known

    @property
    def needs_selection(self) -> bool:
        return self.cached_keys is None


def _resolve(name: str, table_columns: tuple[str, ...]) -> str | None:
    if name in table_columns:
        return name
    matches = [c for c in table_columns if c.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None


def _target(operation: object) -> str | None:
    """The SELECT an ``execute`` of ``operation`` is about: itself, or the one statement after EXPLAIN."""
    if not isinstance(operation, str):
        return None
    explained = explain.explained_statements(operation)
    if explained is None:
        return operation
    return explained[0] if len(explained) == 1 else None


def unknown_group_column(connection: Connection, operation: object, parameters: object) -> tuple[Query, Table, str] | None:
    """``(query, table, column)`` when ``operation`` (or the statement it EXPLAINs) is a plain SELECT
    grouping by a column with no declared domain; None otherwise (the ordinary engine handles it,
    and reports its errors)."""
    target = _target(operation)
    if target is None:
        return None
    try:  # GROUPING SETS / CUBE / ROLLUP / UNION ALL are refused here too: the batch engine handles them
        query = parse(target, parameters)  # type: ignore[arg-type]
    except (ProgrammingError, NotSupportedError):
        return None
    table = connection._tables.get(query.table.lower())
    if table is None:
        return None
    names = tuple(table.column_types)
    unknown = [r for r in (_resolve(c, names) for c in query.group_by) if r is not None and not table.schema.column(r).is_known]
    if not unknown:
        return None
    if len(set(unknown)) > 1:
        raise NotSupportedError(
            f"GROUP BY: columns {unknown} have no declared domain; partition selection handles one such column per "
            "statement: declare the domain (categories, range or bins) of all but one in the schema"
        )
    return query, table, unknown[0]


def selection_delta(connection: Connection) -> float:
    """δ one selection spends: ``connection.selection_delta``, or a share of the budget's δ."""
    configured = connection.selection_delta
    if configured is None:
        return connection.budget.delta * DEFAULT_SELECTION_DELTA_SHARE
    if isinstance(configured, bool) or not isinstance(configured, (int, float)) or not 0 <= configured < 1:
        raise ProgrammingError(f"connection.selection_delta must be a number in [0, 1) or None, got {configured!r}")
    return float(configured)


def prepare(
    connection: Connection, operation: str, query: Query, table: Table, column: str, epsilon: float | None, rho: float | None
) -> KeyedStatement:
    """Check, compile, design and price the statement (reads no data, charges nothing; the budget is
    checked by :func:`run`, before reading)."""
    requested = connection._cost(epsilon, rho)
    type_name = table.column_types[column]
    if not (is_numeric_type(type_name) or type_name.upper().startswith(_KEY_TYPES)):
        raise NotSupportedError(
            f"GROUP BY: column {column!r} has type {type_name}; keys of a column with no declared domain must be "
            "strings, numbers or booleans: declare its domain, or group by a column of such a type instead"
        )
    bounds = KeyBounds.of(table.schema)
    cached = connection._released_keys.get(table, column, bounds)
    if cached is not None:
        compiled = compile_query(query, _with_domain(table.schema, released_domain(column, cached)), tuple(table.column_types))
        plan = _count_plan(compiled, _privacy(requested), bounds) if compiled.workload is not None else None
        statement = KeyedStatement(operation, query, table, column, bounds, compiled, requested, None, cached, plan)
    else:
        if query.where is not None and any(c.lower() == column.lower() for c in predicate_columns(query.where)):
            raise NotSupportedError(
                f"WHERE: column {column!r} has no declared domain in the schema of {table.name!r}; declare its "
                "categories, range or bins, or select its keys first with a GROUP BY on it (a predicate on it "
                "cannot be compiled to a mask over a public domain)"
            )
        placeholder = ColumnDomain(column, "categories", (0 if is_numeric_type(type_name) else "",))
        compiled = compile_query(query, _with_domain(table.schema, placeholder), tuple(table.column_types))
        family, budget = ("laplace", requested.epsilon) if requested.epsilon is not None else ("gaussian", requested.rho)
        reuse_allowed = (
            bounds.max_rows_per_group == 1
            and compiled.group_columns == (column,)
            and all(item.column is None for item in compiled.query.select if isinstance(item, Count))
        )
        try:
            chosen = design(family, float(budget), selection_delta(connection), bounds, reuse_allowed)
        except PartitionSelectionImpossibleError as error:
            raise ProgrammingError(f"GROUP BY {column!r}: {error}") from error
        except ValueError as error:
            raise ProgrammingError(f"GROUP BY {column!r}: cannot design partition selection: {error}") from error
        statement = KeyedStatement(operation, query, table, column, bounds, compiled, chosen.cost(), chosen, None, None)
    return statement


def _privacy(cost: Cost) -> planner.Privacy:
    return planner.Privacy.laplace(cost.epsilon) if cost.epsilon is not None else planner.Privacy.zcdp(cost.rho)


def _count_plan(compiled: CompiledQuery, privacy: planner.Privacy, bounds: KeyBounds) -> planner.Plan:
    try:
        return planner.plan(compiled.workload, privacy, contributions=bounds.contributions)  # type: ignore[arg-type]
    except MemoryError as error:
        raise NotSupportedError(f"the statement's workload is too large to plan: {error}") from error
    except (ValueError, TypeError) as error:
        raise ProgrammingError(f"cannot plan the statement: {error}") from error


# ---------------------------------------------------------------------------------------------------
# Running it: one pass, selection, counting, one charge, then release.
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What executing a keyed statement released."""

    result: Result
    released: int  # number of keys released (public: it is the number of key rows shown)
    selected: bool  # whether selection ran (False: the cached key set was used)


def _aggregation(statement: KeyedStatement) -> KeyBoundedAggregation:
    compiled, table = statement.compiled, statement.table
    columns = table.counted_columns(compiled.columns)  # the rows every statement counts
    if statement.needs_selection:
        columns[statement.column] = ColumnDomain(statement.column, "unknown")
    attributes = compiled.domain.attributes
    ordered = {name: columns[name] for name in (*attributes, *(c for c in columns if c not in attributes))}
    return KeyBoundedAggregation(
        table=table.relation,
        columns=ordered,
        column_types={c: table.column_types[c] for c in ordered},
        marginals=(tuple(attributes),),
        privacy_unit=table.schema.privacy_unit,
        max_rows_per_unit=table.schema.max_rows_per_unit,
        salt=testing.bounding_salt(),
        row_filters=compiled.row_filters,
        key_column=statement.column,
        max_groups_per_unit=statement.bounds.max_groups_per_unit,
        max_rows_per_group=statement.bounds.max_rows_per_group,
    )


def _marginals(compiled: CompiledQuery, column: str, histogram: KeyHistogram, plan: planner.Plan) -> dict[tuple[str, ...], np.ndarray]:
    """The plan's marginals from the released keys' count tables (other keys' rows are left out)."""
    key_domain = compiled.columns[column]
    cell_of = {label: cell for cell, label in enumerate(key_domain.labels())}
    attributes = compiled.domain.attributes
    axis = attributes.index(column)
    table = np.zeros((key_domain.size, *histogram.counts.shape[1:]), dtype=np.int64)
    for position, key in enumerate(histogram.keys):
        if key in cell_of:
            table[cell_of[key]] = histogram.counts[position]
    full = np.moveaxis(table, 0, axis)
    marginals = {}
    for marginal in plan.required_marginals():
        summed = tuple(i for i, a in enumerate(attributes) if a not in marginal)
        reduced = full.sum(axis=summed) if summed else full
        kept = [a for a in attributes if a in marginal]
        marginals[marginal] = np.transpose(reduced, [kept.index(a) for a in marginal]) if marginal else np.asarray(reduced)
    return marginals


def _empty(compiled: CompiledQuery) -> Result:
    zeros = [np.zeros(len(rows.keys)) for rows in compiled.counts if rows is not None]
    return Result(build_result(compiled, zeros, zeros).description, [], [])


def run(connection: Connection, statement: KeyedStatement) -> Outcome:
    """Read once, select (unless cached), count, charge, release."""
    compiled = statement.compiled
    if compiled.workload is None:  # the WHERE clause makes every count zero: nothing to select or count
        return Outcome(_empty(compiled), 0, False)
    connection._ledger.check(statement.cost)
    aggregation = _aggregation(statement)
    result = connection._backend.run(aggregation.statement().sql(dialect=connection._backend.dialect))
    histogram = aggregation.key_histogram(result)
    noisy: dict[object, int] = {}
    if statement.design is not None:
        primitive = statement.design.primitive
        units = np.minimum(histogram.units, primitive.always_kept()) if math.isfinite(primitive.always_kept()) else histogram.units
        mask, noisy_counts = primitive.keep(units.astype(np.int64), rng=testing.random_source())
        released = tuple(k for k, kept in zip(histogram.keys, mask) if kept)
        if noisy_counts is not None:
            noisy = {k: int(v) for k, v, kept in zip(histogram.keys, noisy_counts, mask) if kept}
    else:
        released = statement.cached_keys or ()
    if not released:  # an empty key set is not cached: a later statement selects afresh
        connection._ledger.charge(statement.cost, statement.operation)
        return Outcome(_empty(compiled), 0, statement.needs_selection)
    final = compile_query(
        statement.query, _with_domain(statement.table.schema, released_domain(statement.column, released)),
        tuple(statement.table.column_types),
    )
    if final.domain.attributes != compiled.domain.attributes:
        raise InternalError(f"the released keys changed the statement's attributes {compiled.domain.attributes}")
    if statement.design is not None and statement.design.reuses_noisy_count:
        answer = _reused_counts(final, statement, histogram, noisy)
    else:
        answer = _measured_counts(final, statement, histogram)
    connection._ledger.charge(statement.cost, statement.operation)
    if statement.needs_selection:
        connection._released_keys.put(statement.table, statement.column, statement.bounds, released)
    return Outcome(answer, len(released), statement.needs_selection)


def _measured_counts(final: CompiledQuery, statement: KeyedStatement, histogram: KeyHistogram) -> Result:
    assert final.workload is not None
    if statement.count_plan is not None:
        plan = statement.count_plan
    else:
        assert statement.design is not None and statement.design.count_privacy is not None
        plan = _count_plan(final, statement.design.count_privacy, statement.bounds)
    marginals = _marginals(final, statement.column, histogram, plan)
    try:
        measurement = plan.measure(marginals, rng=testing.random_source(), noise=testing.noise_enabled())
        answers = plan.answer(measurement)
    except (ValueError, TypeError, KeyError) as error:
        raise InternalError(f"measuring the statement failed: {error}") from error
    return build_result(final, answers.values, answers.variances)


def _reused_counts(final: CompiledQuery, statement: KeyedStatement, histogram: KeyHistogram, noisy: dict[object, int]) -> Result:
    """Rows from the thresholding primitive's noisy unit counts (= row counts, as r = 1)."""
    assert statement.design is not None
    labels = final.columns[statement.column].labels()
    exact = dict(zip(histogram.keys, histogram.units))
    released = exact if not testing.noise_enabled() else noisy
    values, variances = [], []
    for rows in final.counts:
        if rows is None:
            continue
        values.append(np.array([float(released[labels[cell]]) for cell in rows.keys[:, 0]]))
        variances.append(np.full(len(rows.keys), statement.design.count_variance))
    return build_result(final, values, variances)


# ---------------------------------------------------------------------------------------------------
# EXPLAIN and the entry points used by the connection.
# ---------------------------------------------------------------------------------------------------


def explain_rows(statement: KeyedStatement) -> list[explain.ExplainRow]:
    """EXPLAIN rows (``dpsql.explain`` layout) for a keyed statement; reads and charges nothing.

    Sections beyond ``dpsql.explain``'s: ``bounds`` (k, r, m and the counts' sensitivity), ``cost``
    split into the selection's ε and δ and the counting part, ``selection`` (the primitive with its
    parameters, its midpoint, the ``n`` from which keys are always kept), ``split`` (the selection
    share and the objective), ``counts`` (noise variance of one count) and ``keys`` (cached key sets;
    the number considered is withheld; after execution, the number released)."""
    Row = explain.ExplainRow
    cost = statement.cost
    rows = [Row("statement", "1", 1.0, statement.operation)]
    if statement.compiled.workload is None:
        rows.append(Row("cost", "epsilon" if cost.epsilon is not None else "rho", 0.0, "every count is zero by construction: nothing is read or charged"))
        return rows
    rows.append(Row("bounds", "contributions", float(statement.bounds.contributions), statement.bounds.describe()))
    if statement.design is None:
        keys = statement.cached_keys or ()
        name, value = ("epsilon", cost.epsilon) if cost.epsilon is not None else ("rho", cost.rho)
        rows.append(Row("cost", name, float(value), "charged once when executed; counting only (no selection)"))
        rows.append(Row("keys", "cached", float(len(keys)), f"the key set of {statement.column!r} released earlier on this connection is re-used at no cost"))
        plan = statement.count_plan
        if plan is not None:
            rows.append(Row("strategy", plan.strategy_name, None, f"{plan.privacy}, {plan.contributions} row(s) per privacy unit"))
            rows.append(Row("error", "expected total squared error", plan.expected_error(), "of the counts of the released keys"))
        return rows
    design_ = statement.design
    primitive = design_.primitive
    always = primitive.always_kept()
    counting = "reused noisy count" if design_.reuses_noisy_count else "counting"
    counting_name, counting_value = ("epsilon", cost.epsilon) if cost.epsilon is not None else ("rho", cost.rho)
    rows += [
        Row("cost", "selection epsilon", float(cost.approximate_epsilon), "partition selection, composed by addition"),
        Row("cost", "selection delta", float(cost.delta), "partition selection"),
        Row("cost", f"counting {counting_name}", float(counting_value), "charged once with the selection when executed"),
        Row("selection", primitive.name, primitive.midpoint(), primitive.describe()),
        Row("selection", "midpoint", primitive.midpoint(), "distinct units where a key is kept with probability 1/2"),
        Row(
            "selection", "always kept from n", float(always) if math.isfinite(always) else None,
            "unit counts are clipped there" if math.isfinite(always) else "no n is kept with certainty",
        ),
        Row("split", "selection fraction", design_.fraction, design_.describe()),
        Row("counts", counting, design_.count_variance, "noise variance of one released count"),
        Row("keys", "considered", None, "withheld: the number of keys in the data is private"),
    ]
    return rows


def explain_text(rows: list[explain.ExplainRow]) -> str:
    lines = []
    for row in rows:
        value = "" if row.value is None else f" = {row.value:.6g}"
        detail = "" if not row.detail else f" ({row.detail})"
        lines.append(f"{row.section}: {row.name}{value}{detail}")
    return "\n".join(lines)


def execute(
    connection: Connection, operation: object, parameters: object, epsilon: float | None, rho: float | None
) -> tuple[Result, str] | None:
    """``cursor.execute`` of a statement grouping by an unknown column (or its EXPLAIN): the result and
    the explanation; None when the statement is not one (the ordinary engine runs it)."""
    found = unknown_group_column(connection, operation, parameters)
    if found is None:
        return None
    query, table, column = found
    target = _target(operation)
    assert target is not None
    statement = prepare(connection, target, query, table, column, epsilon, rho)
    rows = explain_rows(statement)
    if explain.explained_statements(operation) is not None:  # type: ignore[arg-type]
        return Result(explain.DESCRIPTION, [r.as_tuple() for r in rows], [(None,) * 4] * len(rows)), explain_text(rows)
    outcome = run(connection, statement)
    rows.append(
        explain.ExplainRow(
            "keys", "released", float(outcome.released),
            "newly selected and cached on the connection" if outcome.selected else "from the cached key set",
        )
    )
    return outcome.result, explain_text(rows)


def explanation(connection: Connection, operation: object, parameters: object, epsilon: float | None, rho: float | None) -> str | None:
    """``connection.explain`` of such a statement (None when it is not one)."""
    found = unknown_group_column(connection, operation, parameters)
    if found is None:
        return None
    query, table, column = found
    return explain_text(explain_rows(prepare(connection, str(_target(operation)), query, table, column, epsilon, rho)))
