"""Privacy audits of a CUBE (public API, the grouping-sets release path) and of ridge-pair noise
(a range workload under pure DP that the planner answers with p-Identity + ridge pairs).

CUBE: ``GROUP BY GROUPING SETS ((slot, a, b), (slot, a), (slot, b), (slot))`` — the cube of (a, b)
within each of ``2 SLOTS`` slots, released by ``cursor.execute`` (bounding, planning, noise, GLS,
one charge). D' slots hold one unit more (3 rows, bound 1) in cell (a, b) = (0, 0). Events on the
released values of a slot: its cell (0, 0), its subtotal a = 0 and its total are each at least two above
D's value. (The released counts here are whole numbers — integer noise on identity blocks, and released
numbers carry no float residue — so "above" would be "at least one above": with least squares' residue,
``3.9999999999998`` used to read as below 4, an artefact that made events one above D's value look more
telling than they are; two above keeps the broken release's loss clearly visible.)

Ridge: ``Plan.measure`` of the planner's public API (what the engine calls once the marginals are
read) on ``Identity(copy) ⊗ AllRange(x)``: the strategy is p-Identity + ridge on x, applied to every
copy with independent noise (one measurement = ``COPIES`` runs). D' copies have one unit more at
x = 7. Events on the measured rows that change: each alone, and all of them together.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
from planner import Domain, Privacy, Workload, plan
from planner.workload import AllRange, Factor, Identity, Product
from privacy_audit import audit, half_laplace_noise, half_ridge_noise, no_contribution_bound

SLOTS = 500
UNITS = 3  # units per (slot, a, b) cell in D
CUBE_RUNS = 10_000  # per dataset: 20 releases
CUBE = "SELECT slot, a, b, COUNT(*) AS n FROM t GROUP BY GROUPING SETS ((slot, a, b), (slot, a), (slot, b), (slot))"
CUBE_SCHEMA = {
    "privacy_unit": "pid",
    "max_rows_per_unit": 1,
    "columns": {"slot": {"range": [0, 2 * SLOTS - 1]}, "a": {"categories": [0, 1]}, "b": {"categories": [0, 1]}},
}
COPIES, CELLS, CHANGED_CELL = 4000, 32, 7
RIDGE_RUNS = 12_000  # per dataset: 6 measurements


def cube_table() -> pd.DataFrame:
    slot, a, b = (grid.ravel() for grid in np.meshgrid(np.arange(2 * SLOTS), [0, 1], [0, 1], indexing="ij"))
    rows = pd.DataFrame({"slot": np.repeat(slot, UNITS), "a": np.repeat(a, UNITS), "b": np.repeat(b, UNITS)})
    added = pd.DataFrame({"slot": np.repeat(np.arange(SLOTS, 2 * SLOTS), 3), "a": 0, "b": 0})  # one unit, 3 rows
    rows["pid"] = np.arange(len(rows))
    added["pid"] = len(rows) + np.repeat(np.arange(SLOTS), 3)
    return pd.concat([rows, added], ignore_index=True)


def cube_events(runs: int, seed: int = 2) -> tuple[np.ndarray, np.ndarray, float]:
    """Per slot and release: (cell (0,0) ≥ 3+2, subtotal a=0 ≥ 6+2, total ≥ 12+2); D slots, D' slots, ε charged."""
    connection = dpsql.connect(budget=dpsql.Budget(1e6), reuse=False)
    connection.register("t", cube_table(), schema=CUBE_SCHEMA)
    cursor = connection.cursor()
    events = []
    with dpsql.testing.seeded(seed):
        for _ in range(math.ceil(runs / SLOTS)):
            rows = cursor.execute(CUBE, epsilon=1.0).fetchall()
            cell = {r[0]: r[3] for r in rows if r[1] == 0 and r[2] == 0}
            subtotal = {r[0]: r[3] for r in rows if r[1] == 0 and r[2] is None}
            total = {r[0]: r[3] for r in rows if r[1] is None and r[2] is None}
            slots = range(2 * SLOTS)
            events.append(np.array([[cell[s] >= UNITS + 2, subtotal[s] >= 2 * UNITS + 2, total[s] >= 4 * UNITS + 2] for s in slots]))
    spent = connection.budget_spent()
    connection.close()
    stacked = np.array(events)  # releases × slots × events
    return stacked[:, :SLOTS].reshape(-1, 3), stacked[:, SLOTS:].reshape(-1, 3), spent.epsilon / spent.statements


CUBE_EVENTS = ["cell (0,0) >= 5", "subtotal a=0 >= 8", "total >= 14"]


def test_a_cube_keeps_its_epsilon(audit_runs: int | None) -> None:
    on_d, on_neighbour, claimed = cube_events(audit_runs or CUBE_RUNS)
    result = audit(on_neighbour, on_d, CUBE_EVENTS, claimed)
    assert claimed == pytest.approx(1.0) and result.passes(), str(result)


@pytest.mark.parametrize("breakage", [half_laplace_noise, no_contribution_bound], ids=lambda f: f.__name__)
def test_the_cube_audit_detects_a_broken_release(monkeypatch: pytest.MonkeyPatch, breakage, audit_runs: int | None) -> None:
    breakage(monkeypatch)
    on_d, on_neighbour, claimed = cube_events(audit_runs or CUBE_RUNS)
    result = audit(on_neighbour, on_d, CUBE_EVENTS, claimed)
    assert not result.passes() and result.epsilon_lower_bound > 1.3 * claimed, str(result)


# -- ridge pairs ---------------------------------------------------------------------------------------------


def ridge_events(runs: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray, list[str], float]:
    domain = Domain({"copy": COPIES, "x": CELLS}, ordered={"x"})
    workload = Workload(domain, (Product(domain, (Factor(("copy",), Identity(COPIES)), Factor(("x",), AllRange(CELLS)))),))
    ranges = plan(workload, Privacy.laplace(1.0))
    assert ranges.strategy_name.startswith("p-identity+ridge")
    counts = np.full((COPIES, CELLS), 5, dtype=np.int64)
    counts[COPIES // 2 :, CHANGED_CELL] += 1  # the second half of the copies: D'
    exact = np.concatenate([np.asarray(v) for v in ranges.measure({("copy", "x"): counts}, noise=False).values.values()], axis=1)
    shift = exact[COPIES // 2] - exact[0]
    changed = np.flatnonzero(shift)
    rng = np.random.default_rng(seed)
    hits, claimed = [], math.inf
    for _ in range(math.ceil(runs / (COPIES // 2))):
        measurement = ranges.measure({("copy", "x"): counts}, rng=rng)
        claimed = measurement.privacy.epsilon  # what the engine charges for it
        values = np.concatenate([np.asarray(v) for v in measurement.values.values()], axis=1)
        beyond = np.sign(shift[changed]) * (values[:, changed] - exact[0, changed]) >= np.abs(shift[changed])
        hits.append(np.column_stack([beyond, beyond.all(axis=1)]))
    events = np.concatenate(hits)
    copy_is_neighbour = np.tile(np.arange(COPIES) >= COPIES // 2, len(hits))
    names = [f"row {r} beyond the shift" for r in changed] + ["every changed row beyond its shift"]
    return events[~copy_is_neighbour], events[copy_is_neighbour], names, claimed


def test_ridge_pair_noise_keeps_its_epsilon(audit_runs: int | None) -> None:
    on_d, on_neighbour, names, claimed = ridge_events(audit_runs or RIDGE_RUNS)
    result = audit(on_neighbour, on_d, names, claimed)
    assert claimed == 1.0 and result.passes(), str(result)


def test_the_ridge_audit_detects_half_the_noise(monkeypatch: pytest.MonkeyPatch, audit_runs: int | None) -> None:
    half_ridge_noise(monkeypatch)
    on_d, on_neighbour, names, claimed = ridge_events(audit_runs or RIDGE_RUNS)
    result = audit(on_neighbour, on_d, names, claimed)
    assert not result.passes() and result.epsilon_lower_bound > 1.2 * claimed, str(result)
