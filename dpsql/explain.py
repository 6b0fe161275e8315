"""How a statement is (or was) answered, as rows — ``EXPLAIN`` — and as text — ``cursor.explanation``.

Both come from the same :class:`dpsql.pipeline.Prepared` object that release runs, so EXPLAIN describes
exactly the plan execution uses. Every row is ``(section, name, value, detail)``:

=========== ============================ ================================ =====================================
section     name                         value                            detail
=========== ============================ ================================ =====================================
statement   its number (1, 2, …)         its weight                       the SQL text
column      a column the batch reads     None                             its public domain
bounding    ``rows per unit``            the contribution bound           how rows are bounded and dropped
bounding    ``groups per unit``          group cells a unit counts in     COUNT(DISTINCT unit): bound, sensitivity
cost        ``epsilon`` / ``rho`` / …    what executing it charges        whether kept measurements answer it
selection   the primitive, midpoint, …   its parameters                   (statements that select keys)
strategy    the chosen strategy          None                             privacy spec and contributions
group       a group of measured rows     its budget (ε_g or ρ_g)          rows and per-row noise variance
query       statement.grouping set       largest expected RMSE            rows and RMSE range
error       expected total squared error / lower bound / ratio to the lower bound (docs/math.md §7)
candidate   a strategy considered        its expected total squared error its groups and rows
glossary    ``docs/glossary.md``         None                             (last) where every term is explained
=========== ============================ ================================ =====================================

After a statement ran, ``cursor.explanation`` adds what happened: ``answered`` (free from kept
measurements, measured, or combined with kept ones), the keys released, the counting plan chosen for
them, and what ``non_negative=True`` changed. EXPLAIN without a cost explains the plan at ε = 1 (ρ = 1
under zCDP) and says so: expected variances scale as 1/ε² (1/ρ).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
import numpy as np

import planner
from dpsql.request import Prepared
from dpsql.columns import clean_number
from dpsql.result import ResultSet
from dpsql.sql import kinds
from dpsql.types import NUMBER, STRING

GLOSSARY = "docs/glossary.md"
"""Where every section and term EXPLAIN prints is explained (a path in the repository)."""

DESCRIPTION = (
    ("section", STRING, None, None, None, None, False),
    ("name", STRING, None, None, None, None, False),
    ("value", NUMBER, None, None, None, None, True),
    ("detail", STRING, None, None, None, None, True),
)


@dataclass(frozen=True)
class ExplainRow:
    section: str
    name: str
    value: float | None
    detail: str | None

    def as_tuple(self) -> tuple[object, ...]:
        """The row as EXPLAIN returns it: figures without float residue (``clean_number``)."""
        value = clean_number(float(self.value)) if isinstance(self.value, (float, np.floating)) else self.value
        return (self.section, self.name, value, self.detail)


GLOSSARY_ROW = ExplainRow("glossary", GLOSSARY, None, "what every section and term above means")


@dataclass(frozen=True)
class Outcome:
    """What release did: ``how`` is "zero" (nothing to count), "keys" (only declared keys asked for), "free" (kept measurements answered it),
    "measured" or "combined" (a fresh measurement combined with kept ones); ``released`` keys when the
    statement selected keys; the counting ``plan`` chosen for them; the non-negative ``note``."""

    how: str
    released: int | None = None
    plan: planner.Plan | None = None
    note: str | None = None
    clip: tuple[tuple[str, float, str], ...] = ()  # ``clip: auto``, ``bounds: auto``: (column, clip released, detail) per clip


_HOW = {
    "zero": "every count is zero by construction: nothing was read or charged",
    "keys": "only declared group keys were asked for: public, nothing was read or charged",
    "free": "from kept measurements by GLS: nothing was read or charged",
    "measured": "measured afresh: one read of the private rows, charged once",
    "combined": "measured and combined with kept measurements by GLS: errors are at most a fresh measurement's",
}


def explain_rows(prepared: Prepared) -> list[ExplainRow]:
    """The rows of the module docstring for a prepared request (reads no data, charges nothing): its batch's
    plan, the post-processing of each statement with a public shell, and the glossary's address."""
    return _prepared_rows(prepared) + _shell_rows(prepared) + [GLOSSARY_ROW]


def _prepared_rows(prepared: Prepared) -> list[ExplainRow]:
    """The plan rows of a request, or of each part of a composed one after its share."""
    if not prepared.parts:
        return _plan_rows(prepared)
    cost = prepared.cost
    name, value = ("epsilon", cost.epsilon) if cost.epsilon is not None else ("rho", cost.rho)
    rows = [
        ExplainRow("statement", str(i + 1), w, s.sql) for i, (s, w) in enumerate(zip(prepared.request.statements, prepared.request.weights))
    ]
    rows.append(ExplainRow(
        "composition", "parts", float(len(prepared.parts)),
        "aggregates over different data (several aggregated values, or COUNT(DISTINCT) beside rows), each measured on its own; "
        "the budget split to minimise the total expected error (ε shares ∝ error^(1/3), ρ shares ∝ √error), charged once "
        f"({_see('composition')})",
    ))
    rows.append(ExplainRow("cost", name, float(value), "charged once when executed: the sum of the parts' shares"))
    for number, part in enumerate(prepared.parts, start=1):
        statements = ", ".join(str(i + 1) for i in part.statements)
        rows.append(ExplainRow("composition", f"part {number}", part.share, f"share of the budget for statement(s) {statements}; its plan follows"))
        rows += [row for row in _plan_rows(part.prepared) if row.section != "statement"]
    return rows


def _shell_rows(prepared: Prepared) -> list[ExplainRow]:
    """Per statement with a public shell (``dpsql.sql.split``): what runs it, its SQL, which columns keep error bars."""
    rows = []
    for number, output in enumerate(prepared.request.outputs, start=1):
        if output.shell is None:
            continue
        cores = ", ".join(str(i + 1) for i in output.cores)
        rows += [
            ExplainRow("post-processing", str(number), 0.0, f"free: DuckDB runs it over the released rows of statement(s) {cores} "
                       "and public tables, never private rows (docs/glossary.md#post-processing)"),
            ExplainRow("post-processing", "sql", None, output.shell.text),
            ExplainRow("post-processing", "error bars", None, f"on {', '.join(output.shell.errors) or 'no column'} (an affine "
                       "function of one released value); none on the other columns"),
        ]
    return rows


def _plan_rows(prepared: Prepared) -> list[ExplainRow]:
    request, batch, decision = prepared.request, prepared.batch, prepared.decision
    rows = [ExplainRow("statement", str(i + 1), w, s.sql) for i, (s, w) in enumerate(zip(request.statements, request.weights))]
    selecting = set(prepared.key_columns) if prepared.selection is not None else set()
    for name, column in batch.columns.items():
        detail = f"no declared domain: its keys are selected privately by this statement ({_see('selection')})"
        rows.append(ExplainRow("column", name, None, detail if name in selecting else column.describe()))
    for name, derived in batch.derived.items():
        detail = (f"derived from {derived.source!r}: {derived.map.domain.size} cell(s), counts per {derived.source!r} cell "
                  f"summed into them before the noise ({_see('derived-column')})")
        rows.append(ExplainRow("column", name, None, detail))
    schema = prepared.table.schema
    unit = prepared.table.bounding() if prepared.chosen is None else f"the bound is {prepared.chosen.describe()}"
    rows.append(ExplainRow("bounding", "rows per unit", float(schema.contributions), f"{unit}; rows outside the declared domains are dropped first ({_see('rows-per-unit')})"))
    rows += [ExplainRow(*row) for kind in kinds.KINDS for row in kind.explain(batch, _see)]  # how each kind is measured
    if prepared.clip is not None:
        rows.append(ExplainRow("clip", *prepared.clip.explain(_see("clip"))))
    if prepared.quantile_paths is not None:
        rows += [ExplainRow("mechanism", *row) for row in prepared.quantile_paths.explain(_see("mechanism"))]
    cost_name = "epsilon" if prepared.cost.epsilon is not None else "rho"
    if request.cost is None:
        rows.append(ExplainRow("cost", "not given", None, f"shown for {cost_name} = 1: expected variances scale as 1/{'ε²' if cost_name == 'epsilon' else 'ρ'}"))
    if batch.workload is None:
        why = "every count is zero by construction" if batch.measures else "only declared group keys are asked for (public)"
        rows.append(ExplainRow("cost", cost_name, 0.0, f"{why}: nothing is read or charged"))
        return rows
    if prepared.selection is not None:
        return rows + _selection_rows(prepared)
    if prepared.cached_keys is not None:
        rows.append(ExplainRow("keys", "cached", float(prepared.cached_keys), f"of {prepared.keyed!r}, from the cached key set: no selection"))
    if decision.plan is None:
        rows.append(ExplainRow("cost", cost_name, 0.0, "answered from kept measurements by GLS: nothing is charged"))
        count = decision.kept_measurements
        rows.append(ExplainRow("strategy", "kept measurements", None, f"{count} measurement(s) kept on these rows"))
    else:
        value = prepared.cost.epsilon if prepared.cost.epsilon is not None else prepared.cost.rho
        kept = f"; {len(decision.kept)} of {len(batch.workload.products)} products answered from kept measurements" if decision.kept else ""
        rows.append(ExplainRow("cost", cost_name, float(value), f"charged once when executed{kept}"))
        rows += plan_rows(decision.plan, _counted(prepared))
        rows += _balance_rows(prepared)
    rows += _query_rows(prepared)
    if decision.plan is not None:
        rows += error_rows(decision.plan)
    return rows


def _balance_rows(prepared: Prepared) -> list[ExplainRow]:
    """Per grouping set of a balanced plan: its mean variance over 0.9·π/4 of its own plan's at its share of the
    budget (at most 1: more accurate than measured alone), and the weight the plan gave it."""
    balance = prepared.balance
    if balance is None:
        return []
    branches = prepared.batch.statements[0].branches
    sets = [b for b in branches if b.workload is not None]
    rows = []
    for branch, ratio, factor in zip(sets, balance.ratios, balance.factors):
        label = "(" + ", ".join(branch.group_columns) + ")"
        rows.append(ExplainRow("balance", label, ratio, f"against the set alone at 1/{len(sets)} of the budget; weighed ×{factor:.3g} ({_see('balance')})"))
    return rows


def _see(anchor: str) -> str:
    return f"{GLOSSARY}#{anchor}"


def _counted(prepared: Prepared) -> str:
    """What one privacy unit contributes to the data vector a plan measures: rows, or the (unit, group) pairs of
    ``COUNT(DISTINCT unit)``."""
    return "(unit, group) pair(s)" if prepared.batch.distinct is not None else "row(s)"


def plan_rows(plan: planner.Plan, counted: str = "row(s)") -> list[ExplainRow]:
    rows = [ExplainRow("strategy", plan.strategy_name, None, f"{plan.privacy}, {plan.contributions} {counted} per privacy unit")]
    budget_name = "epsilon" if plan.privacy.is_laplace else "rho"
    for group in plan.group_budgets():
        rows.append(ExplainRow("group", group.name, float(group.budget), f"its share of {budget_name} for {group.rows} measured row(s); noise variance {group.noise_variance:.6g}"))
    return rows


def error_rows(plan: planner.Plan) -> list[ExplainRow]:
    rows = [ExplainRow("error", "expected total squared error", plan.expected_error(), "of the measured products, weights applied")]
    noise = "discrete Laplace" if plan.privacy.is_laplace else "discrete Gaussian"
    if plan.ratio is None:
        rows.append(ExplainRow("error", "lower bound", None, f"not available: {plan.bound_unavailable or 'the bound is 0'}"))
    else:
        rows.append(ExplainRow("error", "lower bound", plan.lower_bound(), f"no strategy with {noise} noise has less ({_see('lower-bound')})"))
        rows.append(ExplainRow("error", "ratio to lower bound", plan.ratio, "expected error / lower bound: 1 is optimal"))
    for summary in sorted(plan.candidates, key=lambda s: s.expected_error):
        rows.append(ExplainRow("candidate", summary.name, summary.expected_error, summary.detail))
    return rows


def _query_rows(prepared: Prepared) -> list[ExplainRow]:
    """Expected RMSE per grouping set: the plan's for measured products, GLS's from what is kept otherwise."""
    workload, decision = prepared.batch.workload, prepared.decision
    assert workload is not None
    variances: dict[int, np.ndarray] = {}
    if decision.plan is not None:
        variances.update(zip(decision.measured, decision.plan.query_variances()))
    variances.update(decision.kept_variances)
    rows = []
    for number, compiled in enumerate(prepared.batch.statements, start=1):
        for branch, query, first in zip(compiled.statement.branches, compiled.branches, compiled.first_products):
            label = f"{number}: ({', '.join(branch.grouping_set)})"
            if query.workload is None:
                rows.append(ExplainRow("query", label, 0.0, "every count is zero by construction"))
                continue
            chosen = np.concatenate([variances[i] for i in range(first, first + len(query.workload.products))]) / prepared.batch.scale**2
            rmse = np.sqrt(np.maximum(chosen, 0.0))
            rows.append(ExplainRow("query", label, float(rmse.max()), f"{rmse.size} released value(s), expected RMSE {rmse.min():.4g}–{rmse.max():.4g}"))
    return rows


def _selection_rows(prepared: Prepared) -> list[ExplainRow]:
    selection = prepared.selection
    assert selection is not None
    if selection.staged is not None:
        return _staged_rows(prepared)
    if selection.measured is not None:
        return _measured_rows(prepared)
    if selection.thresholded is not None:
        return _key_rows(prepared) + _thresholded_rows(prepared)
    chosen, cost = selection.split, prepared.cost
    primitive = chosen.primitive
    always = primitive.always_kept()
    counting = "reused noisy count" if chosen.reuses_noisy_count else "counting"
    counting_name, counting_value = ("epsilon", cost.epsilon) if cost.epsilon is not None else ("rho", cost.rho)
    return [
        ExplainRow("bounds", "keys", float(selection.bounds.max_groups_per_unit), selection.bounds.describe()),
        ExplainRow("cost", "selection epsilon", float(cost.approximate_epsilon), "partition selection, composed by addition"),
        ExplainRow("cost", "selection delta", float(cost.delta), "partition selection"),
        ExplainRow("cost", f"counting {counting_name}", float(counting_value), "charged once with the selection when executed"),
        ExplainRow("selection", primitive.name, primitive.midpoint(), primitive.describe()),
        ExplainRow("selection", "midpoint", primitive.midpoint(), "distinct units where a key is kept with probability 1/2"),
        ExplainRow(
            "selection", "always kept from n", float(always) if math.isfinite(always) else None,
            "unit counts are clipped there" if math.isfinite(always) else "no n is kept with certainty",
        ),
        ExplainRow("split", "selection fraction", chosen.fraction, chosen.describe()),
        ExplainRow("counts", counting, chosen.count_variance, "noise variance of one released count"),
        ExplainRow("strategy", "chosen after selection", None, "the counts are planned for the released keys (the plan is reported after execution)"),
        ExplainRow("keys", "considered", None, "withheld: the number of keys in the data is private"),
    ]


def _key_rows(prepared: Prepared) -> list[ExplainRow]:
    """What a key is when several columns without declared domain take part (``dpsql.selection``)."""
    if prepared.joint:
        columns = ", ".join(prepared.key_columns)
        return [ExplainRow("keys", "tuples", float(len(prepared.key_columns)), f"a key is a tuple ({columns}), selected jointly; unreleased tuples are not shown")]
    return [
        ExplainRow("keys", "public", float(len(keys)), f"the {len(keys)} released key(s) of {column!r}: {prepared.keyed!r} is selected over them")
        for column, keys in prepared.public
    ]


def _staged_rows(prepared: Prepared) -> list[ExplainRow]:
    """Selection in stages (``planner.staged_selection``): the split of the budget and of δ, each stage's threshold."""
    selection = prepared.selection
    assert selection is not None and selection.staged is not None
    staged, cost = selection.staged.stages, prepared.cost  # type: ignore[attr-defined]
    name, value = ("epsilon", cost.epsilon) if cost.epsilon is not None else ("rho", cost.rho)
    first = staged.first[0]
    columns = ", ".join(prepared.key_columns)
    largest = staged.second(staged.max_cells)
    return [
        ExplainRow("keys", "staged", float(len(prepared.key_columns)), f"({columns}): each column's keys selected first, then one column over the others' released keys"),
        ExplainRow("bounds", "keys", float(selection.bounds.max_groups_per_unit), selection.bounds.describe()),
        ExplainRow("cost", name, float(value), "charged once when executed: the two stages' sum (sequential composition)"),
        ExplainRow("cost", "selection delta", float(cost.delta), "the first stage's spent δ plus the δ reserved for the second"),
        ExplainRow("split", "first stage share", staged.share, staged.describe()),
        ExplainRow("selection", "first stage threshold", float(first.threshold), f"per column: a key whose noisy total reaches it is released ({first.describe()})"),
        ExplainRow(
            "selection", "second stage threshold", None,
            f"for keys of |X| cells, chosen after the first stage ({staged.second(1).threshold} for 1 cell, {largest.threshold} for "
            f"{staged.max_cells}); every released key's cells are its noisy counts at {staged.second_privacy}",
        ),
        ExplainRow("keys", "considered", None, "withheld: the number of keys in the data is private"),
    ]


def _measured_rows(prepared: Prepared) -> list[ExplainRow]:
    """SUM/AVG/VARIANCE/STDDEV beside several columns without declared domain (``planner.split_staged_selection``): keys
    selected only — in stages, or one column over others' released keys — at a share of the budget, the statement
    measured over the released keys with the rest."""
    selection = prepared.selection
    assert selection is not None and selection.measured is not None
    chosen, cost = selection.measured.split, prepared.cost  # type: ignore[attr-defined]
    name, value = ("epsilon", cost.epsilon) if cost.epsilon is not None else ("rho", cost.rho)

    def spent(privacy: planner.Privacy) -> float:
        return float(privacy.epsilon if privacy.is_laplace else privacy.rho)

    stages, second = chosen.stages, chosen.second
    if stages is None:
        keys = _key_rows(prepared)
        how = f"{prepared.keyed!r}'s keys released when their noisy totals reach it ({second.describe()})"
    else:
        columns = ", ".join(prepared.key_columns)
        keys = [ExplainRow("keys", "staged", float(len(prepared.key_columns)), f"({columns}): each column's keys selected first, then one column over the others' released keys")]
        how = f"a key of the column selected again is released when its noisy total reaches it ({second.describe()})"
    rows = keys + [
        ExplainRow("bounds", "keys", float(selection.bounds.max_groups_per_unit), selection.bounds.describe()),
        ExplainRow("cost", name, float(value), "charged once when executed: the selection's and the measurement's sum (sequential composition)"),
        ExplainRow("cost", f"selection {name}", spent(chosen.selection_privacy), "selecting keys only, by thresholding their rows' noisy totals"),
        ExplainRow("cost", "selection delta", float(cost.delta), "the thresholds' δ" if stages is None else "the first stage's spent δ plus the δ reserved for the second"),
        ExplainRow("cost", f"measurement {name}", spent(chosen.count_privacy), "the statement's cells over the released keys"),
        ExplainRow("split", "selection fraction", chosen.fraction, chosen.describe()),
    ]
    if stages is not None:
        first = stages.first[0]
        rows += [
            ExplainRow(
                "split", "first stage share", stages.share,
                f"of the selection's {stages.privacy}: stage 1 selects each of the {len(stages.first)} columns' keys from its noisy totals "
                f"at {first.key_privacy}; stage 2, at {stages.second_privacy} and δ ≤ {stages.second_delta:.3g}, the column whose released "
                "keys hold the fewest rows from its keys' noisy totals",
            ),
            ExplainRow("selection", "first stage threshold", float(first.threshold), f"per column: a key whose noisy total reaches it is released ({first.describe()})"),
        ]
    return rows + [
        ExplainRow("selection", "threshold" if stages is None else "second stage threshold", float(second.threshold),
                   f"{how}; the statement is then measured over every tuple of the released keys, tuples not released hidden"),
        ExplainRow("counts", "counting", chosen.count_variance, "noise variance of one count measured alone at the measurement's share"),
        ExplainRow("strategy", "chosen after selection", None, "the cells are planned for the released keys (the plan is reported after execution)"),
        ExplainRow("keys", "considered", None, "withheld: the number of keys in the data is private"),
    ]


def _thresholded_rows(prepared: Prepared) -> list[ExplainRow]:
    """Selection from the measured counts (``dpsql.selection``): shares, noise, threshold, δ, the totals plan,
    and the expected RMSE of every grouping set (per released key for those grouping by the column)."""
    selection = prepared.selection
    assert selection is not None and prepared.batch.workload is not None
    chosen = selection.thresholded
    rule = chosen.release  # type: ignore[attr-defined]
    cost = prepared.cost
    name, value = ("epsilon", cost.epsilon) if cost.epsilon is not None else ("rho", cost.rho)
    budget = "epsilon" if rule.key_privacy.is_laplace else "rho"
    key_budget = rule.key_privacy.epsilon if rule.key_privacy.is_laplace else rule.key_privacy.rho
    rows = [
        ExplainRow("bounds", "keys", float(selection.bounds.max_groups_per_unit), selection.bounds.describe()),
        ExplainRow("cost", name, float(value), "charged once when executed: the counts (selection reuses them)"),
        ExplainRow("cost", "selection delta", float(cost.delta), "keys released by thresholding their measured counts"),
        ExplainRow("selection", "threshold", float(rule.threshold), rule.describe()),
        ExplainRow("selection", "midpoint", float(rule.threshold), "a key whose rows reach about this many is released with probability 1/2"),
        ExplainRow("split", "key share", rule.key_share, f"the rest ({1 - rule.key_share:.0%}) for the queries over all keys; least objective {rule.objective:.4g} on the grid"),
        ExplainRow("strategy", "per-key cells", None, f"{rule.key_privacy}, {rule.sensitivity} {_counted(prepared)} per privacy unit over a key's cells"),
        ExplainRow("group", "cells of every present key", float(key_budget), f"its share of {budget} for {rule.cells} measured row(s) per key; noise variance {rule.cell_variance:.6g}"),
        ExplainRow("keys", "considered", None, "withheld: the number of keys in the data is private"),
    ]
    plan = chosen.totals_plan  # type: ignore[attr-defined]
    if plan is not None:
        rows += plan_rows(plan, _counted(prepared))
    workload = prepared.batch.workload
    variances = {i: rule.answer_variances(workload.products[i], workload.domain.attributes) for i in chosen.per_key}  # type: ignore[attr-defined]
    if plan is not None:
        variances.update(zip(chosen.totals, plan.query_variances()))  # type: ignore[attr-defined]
    for number, compiled in enumerate(prepared.batch.statements, start=1):
        for branch, query, first in zip(compiled.statement.branches, compiled.branches, compiled.first_products):
            if query.workload is None:
                continue
            chosen_variances = np.concatenate([variances[i] for i in range(first, first + len(query.workload.products))])
            rmse = np.sqrt(np.maximum(chosen_variances, 0.0))
            per_key = selection.column in branch.grouping_set or any(selection.column.lower() == c.lower() for c in branch.grouping_set)
            label = f"{number}: ({', '.join(branch.grouping_set)})"
            rows.append(ExplainRow("query", label, float(rmse.max()), ("per released key; " if per_key else "") + f"expected RMSE {rmse.min():.4g}–{rmse.max():.4g}"))
    if plan is not None:
        rows += error_rows(plan)
    return rows


def explain_result(prepared: Prepared) -> ResultSet:
    rows = explain_rows(prepared)
    return ResultSet(DESCRIPTION, [r.as_tuple() for r in rows], [(None,) * 4] * len(rows), render(rows))


@dataclass(frozen=True)
class Explanation:
    """``cursor.explanation`` after release, rendered when read: the EXPLAIN rows of the prepared request
    (the plan as it was when the statement was prepared) and what release did."""

    prepared: Prepared
    outcome: Outcome

    def __str__(self) -> str:
        text = render(_plan_rows(self.prepared) + self.outcome_rows() + _shell_rows(self.prepared) + [GLOSSARY_ROW])
        return text if self.outcome.note is None else f"{text}\n{self.outcome.note}"

    def outcome_rows(self) -> list[ExplainRow]:
        """What release did: how it answered, the keys it released, the plan it measured them with, the clip."""
        outcome = self.outcome
        rows = [ExplainRow("answered", outcome.how, None, _HOW[outcome.how])]
        if outcome.released is not None:
            columns = self.prepared.key_columns
            named = repr(columns[0]) if len(columns) == 1 else "(" + ", ".join(columns) + ")"
            rows.append(ExplainRow("keys", "released", float(outcome.released), f"of {named}, newly selected and cached on the connection"))
        if outcome.plan is not None:
            rows += plan_rows(outcome.plan, _counted(self.prepared)) + error_rows(outcome.plan)
        rows += [ExplainRow("clip", column, value, f"{detail} ({_see('clip')})") for column, value, detail in outcome.clip]
        return rows


@dataclass
class ComposedExplanation:
    """``cursor.explanation`` of a composed request: its EXPLAIN rows (each part's share and plan), then what release
    did in each part."""

    prepared: Prepared
    parts: list[Explanation]

    def __str__(self) -> str:
        rows = _prepared_rows(self.prepared)
        for number, part in enumerate(self.parts, start=1):
            answered, *rest = part.outcome_rows()
            rows += [dataclasses.replace(answered, detail=f"part {number}: {answered.detail}"), *rest]
        text = render(rows + _shell_rows(self.prepared) + [GLOSSARY_ROW])
        notes = [f"part {n}: {p.outcome.note}" for n, p in enumerate(self.parts, start=1) if p.outcome.note is not None]
        return "\n".join([text, *notes])


def render(rows: list[ExplainRow]) -> str:
    """One line per row: ``section: name = value — detail``."""
    lines = []
    for row in rows:
        value = "" if row.value is None else f" = {row.value:.6g}"
        detail = "" if not row.detail else f" — {row.detail}"
        lines.append(f"{row.section}: {row.name}{value}{detail}")
    return "\n".join(lines)
