"""``EXPLAIN <statement>`` / ``EXPLAIN <stmt>; <stmt>; …``: the plan as rows, without reading data or spending.

Every row is ``(section, name, value, detail)``:

========== ============================ ================================ =====================================
section    name                         value                            detail
========== ============================ ================================ =====================================
statement  its number (1, 2, …)         its weight                       the SQL text
cost       ``epsilon`` or ``rho``       what executing it would charge   whether kept measurements answer it
strategy   the chosen strategy          None                             privacy spec and contributions
group      a group of measured rows     its budget (ε_g or ρ_g)          rows and per-row noise variance
query      statement.grouping set       largest expected RMSE            rows and RMSE range
error      expected total squared error / SVD lower bound / ratio to the SVD bound
========== ============================ ================================ =====================================

Products answered from kept measurements (``dpsql.reuse``) show the RMSE GLS gives them from those;
products to be measured show the plan's RMSE (their combination with kept measurements can only lower it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import sqlglot
from sqlglot.errors import SqlglotError

from dpsql.errors import ProgrammingError
from dpsql.reuse import MeasurementStore
from dpsql.types import NUMBER, STRING
from planner.select import BoundUnavailableError

if TYPE_CHECKING:
    from dpsql.batch import PreparedBatch

_EXPLAIN = re.compile(r"^\s*EXPLAIN\b", re.IGNORECASE)
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
        return (self.section, self.name, self.value, self.detail)


def explained_statements(sql: str) -> list[str] | None:
    """The statements after a leading EXPLAIN (several when separated by ';'), or None without EXPLAIN."""
    if not isinstance(sql, str) or not _EXPLAIN.match(sql):
        return None
    rest = _EXPLAIN.sub("", sql, count=1)
    if re.match(r"^\s*ANALYZE\b", rest, re.IGNORECASE):
        raise ProgrammingError("EXPLAIN ANALYZE is not supported: it would run the statement; use EXPLAIN")
    try:
        statements = [s.sql(dialect="duckdb") for s in sqlglot.parse(rest, read="duckdb") if s is not None]
    except SqlglotError as error:
        raise ProgrammingError(f"EXPLAIN: cannot parse the statement: {str(error).strip().splitlines()[0]}") from error
    if not statements:
        raise ProgrammingError("EXPLAIN needs a statement to explain, e.g. EXPLAIN SELECT COUNT(*) FROM t")
    return statements


def explain_rows(prepared: PreparedBatch, store: MeasurementStore) -> list[ExplainRow]:
    """The rows of the module docstring for a prepared batch (pure: reads no data, charges nothing)."""
    rows = [ExplainRow("statement", str(i + 1), s.weight, s.sql) for i, s in enumerate(prepared.statements)]
    plan = prepared.plan
    cost_name = "epsilon" if prepared.cost.epsilon is not None else "rho"
    cost_value = prepared.cost.epsilon if prepared.cost.epsilon is not None else prepared.cost.rho
    if prepared.workload is None:
        rows.append(ExplainRow("cost", cost_name, 0.0, "every count is zero by construction: nothing is read or charged"))
        return rows
    kept = len(prepared.workload.products) - len(prepared.measured)
    if plan is None:
        rows.append(ExplainRow("cost", cost_name, 0.0, "answered from kept measurements by GLS: nothing is charged"))
        rows.append(ExplainRow("strategy", "kept measurements", None, f"{store.measurement_count(prepared.table.name, prepared.columns)} measurement(s) kept"))
    else:
        reuse = f"; {kept} of {len(prepared.workload.products)} products answered from kept measurements" if kept else ""
        rows.append(ExplainRow("cost", cost_name, float(cost_value), f"charged once when executed{reuse}"))
        rows.append(ExplainRow("strategy", plan.strategy_name, None, f"{plan.privacy}, {plan.contributions} row(s) per privacy unit"))
        budget_name = "epsilon" if plan.privacy.is_laplace else "rho"
        for group in plan.group_budgets():
            rows.append(
                ExplainRow("group", group.name, float(group.budget), f"{group.rows} row(s), {budget_name} share, noise variance {group.noise_variance:.6g}")
            )
    variances = _product_variances(prepared, store)
    for number, statement in enumerate(prepared.statements, start=1):
        for part in statement.branches:
            label = f"{number}: ({', '.join(part.branch.grouping_set)})"
            if part.compiled.workload is None:
                rows.append(ExplainRow("query", label, 0.0, "every count is zero by construction"))
                continue
            count = len(part.compiled.workload.products)
            chosen = np.concatenate([variances[i] for i in range(part.first_product, part.first_product + count)])
            rmse = np.sqrt(np.maximum(chosen, 0.0))
            rows.append(
                ExplainRow("query", label, float(rmse.max()), f"{rmse.size} released value(s), expected RMSE {rmse.min():.4g}–{rmse.max():.4g}")
            )
    if plan is not None:
        rows.append(ExplainRow("error", "expected total squared error", plan.expected_error(), "of the measured products, weights applied"))
        try:
            bound = plan.svd_bound()
        except BoundUnavailableError as error:
            rows.append(ExplainRow("error", "svd lower bound", None, str(error)))
        else:
            rows.append(ExplainRow("error", "svd lower bound", bound, "no strategy can have less expected total squared error"))
            ratio = plan.ratio
            rows.append(ExplainRow("error", "ratio to svd bound", ratio, "expected error / SVD bound"))
    return rows


def _product_variances(prepared: PreparedBatch, store: MeasurementStore) -> dict[int, np.ndarray]:
    workload = prepared.workload
    assert workload is not None
    variances: dict[int, np.ndarray] = {}
    if prepared.plan is not None:
        variances.update(zip(prepared.measured, prepared.plan.query_variances()))
    covered = tuple(i for i in range(len(workload.products)) if i not in variances)
    if covered:
        variances.update({i: v for i, (_, v) in store.answer(prepared.table.name, prepared.columns, workload, covered).items()})
    return variances


def explain_text(prepared: PreparedBatch, store: MeasurementStore) -> str:
    """The same rows as readable lines (``cursor.explanation`` after a batch)."""
    lines = []
    for row in explain_rows(prepared, store):
        value = "" if row.value is None else f" = {row.value:.6g}"
        detail = "" if not row.detail else f" ({row.detail})"
        lines.append(f"{row.section}: {row.name}{value}{detail}")
    return "\n".join(lines)
