"""Privacy audits of partition selection (a key with 1 unit against the same key with 0) and of a
local survey's reports, both through the public API.

Selection: ``GROUP BY browser`` on a column with no declared domain releases only the keys it selects.
Each release is a fresh connection (each selection spends its δ = ``connection.selection_delta``) over
``KEYS`` keys of one unit each; without that unit a key is never released, so P[a one-unit key is
released] must stay below the δ the ledger charged. Broken variant: keep probabilities doubled.

Survey: ``Survey.randomize`` on a device, for a record in the domain, another one, and a record whose
value has no cell (NULL where the column is not nullable): every report must satisfy ε-LDP against
every other record, on every report value. Broken variant: the earlier behaviour, where a
record without a cell sent nothing (a missing report is an output too).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.local
import dpsql.testing
from planner.partition import OptimalSelection
from privacy_audit import audit

KEYS = 500
SELECTION_DELTA = 0.05
SELECTION_RUNS = 10_000  # one-unit keys: 20 releases
SELECTION_SCHEMA = {"privacy_unit": "pid", "max_rows_per_unit": 1, "max_rows_per_group": 2, "columns": {"browser": "unknown"}}
# COUNT(browser): the optimal primitive selects from distinct units and a plan counts (the split design);
# COUNT(*): keys are selected by thresholding their measured counts (dpsql.selection)
SELECTING = "SELECT browser, COUNT(browser) FROM t GROUP BY browser"
THRESHOLDING = "SELECT browser, COUNT(*) FROM t GROUP BY browser"
SURVEY_RUNS = 20_000  # reports per record
SURVEY_SCHEMA = {"columns": {"sex": {"categories": ["F", "M"]}, "flag": {"categories": [False, True]}}}


def released_one_unit_keys(runs: int, seed: int = 4, sql: str = SELECTING) -> tuple[np.ndarray, float]:
    """Whether each one-unit key was released, per release (releases·KEYS,), and the δ charged per release."""
    frame = pd.DataFrame({"pid": np.arange(KEYS), "browser": [f"key{k}" for k in range(KEYS)]})
    released, charged = [], []
    with dpsql.testing.seeded(seed):
        for _ in range(math.ceil(runs / KEYS)):
            with dpsql.connect(budget=dpsql.Budget(10.0, 0.5)) as connection:
                connection.selection_delta = SELECTION_DELTA
                connection.register("t", frame, schema=SELECTION_SCHEMA)
                keys = {row[0] for row in connection.cursor().execute(sql, epsilon=1.0)}
                released.append([f"key{k}" in keys for k in range(KEYS)])
                charged.append(connection.budget_spent().delta)
    return np.ravel(released), max(charged)


def test_a_key_with_one_unit_is_released_at_most_with_probability_delta(audit_runs: int | None) -> None:
    """Neighbours: the key's one unit present (D') or not (D, where it is never released)."""
    released, charged = released_one_unit_keys(audit_runs or SELECTION_RUNS)
    never = np.zeros_like(released)
    result = audit(released[:, None], never[:, None], ["the key is released"], epsilon=0.0, delta=charged)
    assert charged == pytest.approx(SELECTION_DELTA) and result.passes(), str(result)
    assert 0 < released.mean()  # the audit sees releases at all


def test_thresholding_measured_counts_releases_a_one_unit_key_at_most_with_probability_delta(audit_runs: int | None) -> None:
    released, charged = released_one_unit_keys(audit_runs or SELECTION_RUNS, sql=THRESHOLDING)
    result = audit(released[:, None], np.zeros_like(released)[:, None], ["the key is released"], epsilon=0.0, delta=charged)
    assert 0 < charged <= SELECTION_DELTA and result.passes(), str(result)
    assert 0 < released.mean()


def test_the_thresholding_audit_detects_a_lowered_threshold(monkeypatch: pytest.MonkeyPatch, audit_runs: int | None) -> None:
    """The broken variant releases keys two rows below the threshold the δ was computed for."""
    from planner import keyed_release

    original = keyed_release.threshold_for
    monkeypatch.setattr(keyed_release, "threshold_for", lambda *args: (original(*args)[0] - 2, original(*args)[1]))
    released, charged = released_one_unit_keys(audit_runs or SELECTION_RUNS, sql=THRESHOLDING)
    result = audit(released[:, None], np.zeros_like(released)[:, None], ["the key is released"], epsilon=0.0, delta=charged)
    assert not result.passes() and result.delta_lower_bound > 1.5 * charged, str(result)


def test_the_selection_audit_detects_doubled_keep_probabilities(monkeypatch: pytest.MonkeyPatch, audit_runs: int | None) -> None:
    original = OptimalSelection.keep_numerator
    monkeypatch.setattr(OptimalSelection, "keep_numerator", lambda self, n: np.minimum(2 * original(self, n), 1 << 62))
    released, charged = released_one_unit_keys(audit_runs or SELECTION_RUNS)
    result = audit(released[:, None], np.zeros_like(released)[:, None], ["the key is released"], epsilon=0.0, delta=charged)
    assert not result.passes() and result.delta_lower_bound > 1.5 * charged, str(result)


# -- a local survey ----------------------------------------------------------------------------------------------

RECORDS = {"F, true": {"sex": "F", "flag": True}, "M, false": {"sex": "M", "flag": False}, "sex NULL": {"sex": None, "flag": True}}


def reports(survey: dpsql.local.Survey, record: dict, runs: int) -> list[object]:
    """What ``runs`` devices holding ``record`` send (None: nothing was sent)."""
    sent: list[object] = []
    for _ in range(runs):
        try:
            report = survey.randomize(record)
        except dpsql.DataError:
            report = None
        sent.append(tuple(report) if isinstance(report, list) else report)
    return sent


def survey_audits(survey: dpsql.local.Survey, runs: int) -> list:
    with dpsql.testing.seeded(5):
        sent = {name: reports(survey, record, runs) for name, record in RECORDS.items()}
    outputs = sorted({report for values in sent.values() for report in values}, key=repr)
    indicators = {name: np.array([[report == output for output in outputs] for report in values]) for name, values in sent.items()}
    names = [f"report {output!r}" for output in outputs]
    return [
        audit(indicators[first], indicators[second], names, survey.epsilon)
        for first, second in (("F, true", "M, false"), ("F, true", "sex NULL"), ("M, false", "sex NULL"))
    ]


@pytest.fixture(scope="module")
def survey() -> dpsql.local.Survey:
    return dpsql.local.design(SURVEY_SCHEMA, ["SELECT sex, flag, COUNT(*) FROM t GROUP BY sex, flag"], 1.0, seed=0, restarts=1, iterations=100)


def test_every_record_reports_under_the_surveys_epsilon(survey: dpsql.local.Survey, audit_runs: int | None) -> None:
    results = survey_audits(survey, audit_runs or SURVEY_RUNS)
    assert survey.epsilon == 1.0 and all(result.passes() for result in results), [str(r) for r in results]


def test_the_survey_audit_detects_a_record_that_sends_nothing(
    survey: dpsql.local.Survey, monkeypatch: pytest.MonkeyPatch, audit_runs: int | None
) -> None:
    """The earlier client: a value without a cell raised, and no report was sent."""
    monkeypatch.setattr(dpsql.local.Survey, "reported_cell", lambda self, record, rng: self.cell(record))
    results = survey_audits(survey, audit_runs or SURVEY_RUNS)
    assert results[0].passes() and not results[1].passes(), str(results[1])
    assert results[1].delta_lower_bound > 0.99 and results[1].epsilon_lower_bound > 5, str(results[1])  # no report: certain
