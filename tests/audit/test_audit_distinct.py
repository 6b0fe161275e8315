"""Privacy audit of COUNT(DISTINCT privacy unit) through the public API (docs/math.md §14).

The pattern of test_audit_counts.py: ``GROUP BY slot`` over ``2 SLOTS`` slots, each of the first ``SLOTS``
holding ``UNITS`` units of one row (the dataset D, seen from that slot) and each of the others one unit
more (D'), with 3 rows in its slot — all kept (``max_rows_per_unit: 3``). A distinct-unit count must count
that unit once, with noise for sensitivity 1 (``max_groups_per_unit: 1``); a release that counted its rows
(3) with that noise is detected. Events: the released count is at least ``UNITS + s``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.sql.bounded
import dpsql.testing
from privacy_audit import AuditResult, audit

SLOTS = 1000  # neighbouring pairs per release
UNITS = 5  # units per slot in D
SHIFTS = (1, 2, 3)  # events: released count ≥ UNITS + shift
DEFAULT_RUNS = 20_000  # per dataset: 20 releases
EPSILON = 1.0
SCHEMA = {"privacy_unit": "pid", "max_rows_per_unit": 3, "max_groups_per_unit": 1, "columns": {"slot": {"range": [0, 2 * SLOTS - 1]}}}
QUERY = "SELECT slot, COUNT(DISTINCT pid) AS n FROM t GROUP BY slot"


def neighbouring_table() -> pd.DataFrame:
    """Slots 0 … SLOTS−1: UNITS one-row units each (D); slots SLOTS … 2·SLOTS−1: one more unit, with 3 rows (D')."""
    slots = np.arange(2 * SLOTS)
    base = np.repeat(slots, UNITS)
    extra = np.repeat(slots[SLOTS:], 3)
    pid = np.concatenate([np.arange(base.size), np.repeat(np.arange(base.size, base.size + SLOTS), 3)])
    return pd.DataFrame({"pid": pid, "slot": np.concatenate([base, extra])})


def audit_distinct(runs: int, seed: int = 1) -> AuditResult:
    connection = dpsql.connect(budget=dpsql.Budget(1e6, 1e-3), reuse=False)
    connection.register("t", neighbouring_table(), schema=SCHEMA)
    cursor = connection.cursor()
    releases = []
    with dpsql.testing.seeded(seed):
        for _ in range(math.ceil(runs / SLOTS)):
            cursor.execute(QUERY, epsilon=EPSILON)
            releases.append([row[1] for row in cursor.fetchall()])
    assert cursor.explanation.count("strategy: identity") == 1  # one independent noisy count per slot
    spent = connection.budget_spent()
    connection.close()
    events = np.stack([np.array(releases) >= UNITS + shift for shift in SHIFTS], axis=-1)
    on_d, on_neighbour = events[:, :SLOTS].reshape(-1, len(SHIFTS)), events[:, SLOTS:].reshape(-1, len(SHIFTS))
    return audit(on_neighbour, on_d, [f"count >= {UNITS + s}" for s in SHIFTS], spent.epsilon / spent.statements)


def test_distinct_unit_count_keeps_its_epsilon(audit_runs: int | None) -> None:
    result = audit_distinct(audit_runs or DEFAULT_RUNS)
    assert result.epsilon == pytest.approx(EPSILON)
    assert result.passes(), str(result)


def test_audit_detects_rows_counted_instead_of_units(monkeypatch: pytest.MonkeyPatch, audit_runs: int | None) -> None:
    original = dpsql.sql.bounded.pairs

    def rows_not_pairs(rows, group, unit, bound, salt):  # type: ignore[no-untyped-def]
        """Every row of a unit counted, as if the rows were its groups (the DISTINCT and the bound dropped)."""
        counted = original(rows, group, unit, 2**31 - 1, salt)
        counted.find(dpsql.sql.bounded.exp.Distinct).pop()
        return counted

    monkeypatch.setattr(dpsql.sql.bounded, "pairs", rows_not_pairs)
    result = audit_distinct(audit_runs or DEFAULT_RUNS)
    assert not result.passes() and result.epsilon_lower_bound > 1.3 * EPSILON, str(result)
