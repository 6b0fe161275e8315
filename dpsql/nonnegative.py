"""Non-negative answers: the released GLS answers post-processed into answers of non-negative counts.

``cursor.execute(sql, epsilon=…, non_negative=True)``, ``connection.workload([...], non_negative=True)``
or the connection default ``dpsql.connect(..., non_negative=True)`` replace the GLS answers by those of
the non-negative weighted least-squares fit (docs/math.md §3 with
``x ≥ 0``) on the marginal over every column the statement reads. It is post-processing of the same
measurement: it costs nothing more and the ledger charge is the same. Every answer is a sum of the
fitted non-negative cells, so no count is negative and subtotals still equal the sums of their cells.
The standard errors (``cursor.errors``, confidence intervals) stay the GLS ones: NNLS answers are
biased near zero and their error has no closed form, though it is lower than GLS's on sparse tables.

Where the fit's estimates come from:

- a fresh measurement that the connection does not keep (``reuse=False``, or a
  strategy outside the kept basis): ``planner.Plan.answer_nonnegative``, available for marginal-type
  strategies (identity, marginals, residual, Fourier); other strategies (hierarchy, HATs, eigen) keep
  their GLS answers and the explanation says so;
- the connection's kept measurements (``planner.store``, on by default): the same fit on every kept
  estimate of the statement's columns, so re-used answers are non-negative too;
- a batch mixing both (some products re-used, others measured by a strategy that is not kept): GLS
  answers, with a note.

Nothing here raises after the charge: a fit that cannot run (too many cells) falls back to GLS with the
reason in the note.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from planner import Answers, Measurement, MeasurementStore, Plan, Workload

GLS_ERRORS_NOTE = "standard errors are the GLS ones"


@dataclass(frozen=True)
class Finished:
    """The answers to release and the line that says how they were made (for ``cursor.explanation``)."""

    answers: Answers
    note: str


def unavailable(gls: Answers, reason: str) -> Finished:
    """Keep the GLS answers, saying why the non-negative ones could not be made."""
    return Finished(gls, f"non-negative answers unavailable ({reason}); released the GLS answers")


def from_measurement(plan: Plan, measurement: Measurement, gls: Answers) -> Finished:
    """NNLS on one fresh measurement (marginal-type strategies), or GLS with the reason."""
    try:
        answers, report = plan.answer_nonnegative(measurement)
    except (TypeError, ValueError, ArithmeticError) as error:
        return unavailable(gls, str(error))
    return Finished(answers, f"{report}; {GLS_ERRORS_NOTE}")


def from_store(store: MeasurementStore, rows: Hashable, workload: Workload, gls: Answers) -> Finished:
    """NNLS on every kept estimate of ``rows`` over the workload's attributes (``MeasurementStore.answer_nonnegative``);
    ``gls`` are the store's GLS answers to ``workload`` (their variances are kept)."""
    try:
        values, report = store.answer_nonnegative(rows, workload, gls.values)
    except (ValueError, ArithmeticError) as error:
        return unavailable(gls, str(error))
    return Finished(Answers(values, gls.variances), f"{report} (fitted on the kept measurements); {GLS_ERRORS_NOTE}")
