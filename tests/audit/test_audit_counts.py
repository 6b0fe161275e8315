"""Privacy audit of COUNT through the public API: discrete Laplace (pure ε) and discrete Gaussian (ρ-zCDP).

Every release runs ``cursor.execute`` on a registered table (bounding in DuckDB, planning, noise,
the ledger charge). One statement audits many neighbouring pairs at once: ``GROUP BY slot`` over
``2 SLOTS`` slots, where each of the first ``SLOTS`` holds ``UNITS`` units (the dataset D, seen from that
slot) and each of the others one unit more (D'). The planner measures this marginal with the
identity strategy, each slot its own count plus independent noise, so every slot is one run of the
mechanism on D or D' (the test checks the strategy). The added unit has 3 rows, which
``max_rows_per_unit: 1`` must cut to one. Events: the released count is at least ``UNITS + s``.

The broken variants must be detected: half the noise scale (σ/2 for Gaussian), and contribution
bounding switched off (the added unit counted 3 times).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
from privacy_audit import AuditResult, audit, half_gaussian_noise, half_laplace_noise, no_contribution_bound, zcdp_delta

SLOTS = 1000  # neighbouring pairs per release
UNITS = 5  # units per slot in D
SHIFTS = (1, 2, 3)  # events: released count ≥ UNITS + shift
DEFAULT_RUNS = 20_000  # per dataset: 20 releases
EPSILON = 1.0
RHO = 0.125
GAUSSIAN_EPSILON = 1.0  # the ε at which the zCDP claim's δ is audited


def neighbouring_table() -> pd.DataFrame:
    """Slots 0 … SLOTS−1: UNITS units each (D); slots SLOTS … 2·SLOTS−1: one more unit, with 3 rows (D')."""
    slots = np.arange(2 * SLOTS)
    base = np.repeat(slots, UNITS)
    extra = np.repeat(slots[SLOTS:], 3)  # the added unit's three rows
    pid = np.concatenate([np.arange(base.size), np.repeat(np.arange(base.size, base.size + SLOTS), 3)])
    return pd.DataFrame({"pid": pid, "slot": np.concatenate([base, extra])})


SCHEMA = {"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {"slot": {"range": [0, 2 * SLOTS - 1]}}}
QUERY = "SELECT slot, COUNT(*) AS n FROM t GROUP BY slot"


def released_counts(noise: str, cost: dict[str, float], runs: int, seed: int) -> tuple[np.ndarray, dpsql.Spent]:
    """``runs`` releases per dataset: an array (releases × 2·SLOTS) of released counts, and what was spent."""
    connection = dpsql.connect(budget=dpsql.Budget(1e6, 1e-3), noise=noise, reuse=False)
    connection.register("t", neighbouring_table(), schema=SCHEMA)
    cursor = connection.cursor()
    releases = []
    with dpsql.testing.seeded(seed):
        for _ in range(math.ceil(runs / SLOTS)):
            cursor.execute(QUERY, **cost)
            releases.append([row[1] for row in cursor.fetchall()])
    assert cursor.explanation.count("strategy: identity") == 1  # one independent noisy count per slot
    spent = connection.budget_spent()
    connection.close()
    return np.array(releases), spent


def audit_counts(noise: str, cost: dict[str, float], runs: int, seed: int = 1) -> AuditResult:
    releases, spent = released_counts(noise, cost, runs, seed)
    events = np.stack([releases >= UNITS + shift for shift in SHIFTS], axis=-1)  # releases × slots × events
    on_d, on_neighbour = events[:, :SLOTS].reshape(-1, len(SHIFTS)), events[:, SLOTS:].reshape(-1, len(SHIFTS))
    names = [f"count >= {UNITS + s}" for s in SHIFTS]
    if noise == "laplace":
        claimed = spent.epsilon / spent.statements  # what the ledger charged per statement
        return audit(on_neighbour, on_d, names, claimed)
    rho = spent.rho / spent.statements
    return audit(on_neighbour, on_d, names, GAUSSIAN_EPSILON, zcdp_delta(rho, GAUSSIAN_EPSILON))


def test_laplace_count_keeps_its_epsilon(audit_runs: int | None) -> None:
    result = audit_counts("laplace", {"epsilon": EPSILON}, audit_runs or DEFAULT_RUNS)
    assert result.epsilon == pytest.approx(EPSILON)
    assert result.passes(), str(result)


@pytest.mark.parametrize("breakage", [half_laplace_noise, no_contribution_bound], ids=lambda f: f.__name__)
def test_laplace_audit_detects_a_broken_release(monkeypatch: pytest.MonkeyPatch, breakage, audit_runs: int | None) -> None:
    breakage(monkeypatch)
    result = audit_counts("laplace", {"epsilon": EPSILON}, audit_runs or DEFAULT_RUNS)
    assert not result.passes() and result.epsilon_lower_bound > 1.3 * EPSILON, str(result)


def test_gaussian_count_keeps_its_zcdp_guarantee(audit_runs: int | None) -> None:
    result = audit_counts("gaussian", {"rho": RHO}, audit_runs or DEFAULT_RUNS)
    assert result.delta == pytest.approx(zcdp_delta(RHO, GAUSSIAN_EPSILON))
    assert result.passes(), str(result)


@pytest.mark.parametrize("breakage", [half_gaussian_noise, no_contribution_bound], ids=lambda f: f.__name__)
def test_gaussian_audit_detects_a_broken_release(monkeypatch: pytest.MonkeyPatch, breakage, audit_runs: int | None) -> None:
    breakage(monkeypatch)
    result = audit_counts("gaussian", {"rho": RHO}, audit_runs or DEFAULT_RUNS)
    assert not result.passes() and result.delta_lower_bound > 2 * result.delta, str(result)
