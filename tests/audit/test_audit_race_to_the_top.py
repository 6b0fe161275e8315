"""Privacy audit of R2T (``planner.RaceToTheTop``, docs/math.md), at the planner level like the ridge audit.

Each release answers 4,000 independent cells with ε = 1 each: the first 2,000 hold the per-level answers of a
dataset D with no rows (``Q(D, τ_j) = 0``), the others those of D' = D plus one unit with 64 rows
(``Q(D', τ_j) = min(64, τ_j)``). Every cell gets its own draws at every level, so each cell is one run of the
scalar mechanism on D or D'. Events: the released value is at least 5, 10 or 20. The broken variant calibrates
every level's noise to one row (as if truncating did not change the sensitivity): it must fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner import Privacy, RaceToTheTop
from privacy_audit import AuditResult, audit

CELLS = 2000  # runs per dataset per release
ROWS = 64  # the added unit's rows
THRESHOLDS = (5, 10, 20)
DEFAULT_RUNS = 20_000
EPSILON = 1.0


def audit_release(runs: int, r2t: RaceToTheTop) -> AuditResult:
    on_d = np.zeros((r2t.level_count, CELLS), dtype=np.int64)
    on_neighbour = np.repeat(np.minimum(ROWS, np.array(r2t.truncations))[:, None], CELLS, axis=1)
    answers = np.concatenate([on_d, on_neighbour], axis=1)
    released = np.stack([r2t.release(answers, rng=seed).values for seed in range(math.ceil(runs / CELLS))])
    events = np.stack([released >= t for t in THRESHOLDS], axis=-1)
    first, second = events[:, :CELLS].reshape(-1, len(THRESHOLDS)), events[:, CELLS:].reshape(-1, len(THRESHOLDS))
    return audit(second, first, [f"value >= {t}" for t in THRESHOLDS], r2t.level_privacy.epsilon * r2t.level_count)


def test_r2t_keeps_its_epsilon(audit_runs: int | None) -> None:
    r2t = RaceToTheTop.design(Privacy.laplace(EPSILON), largest=ROWS)
    result = audit_release(audit_runs or DEFAULT_RUNS, r2t)
    assert result.epsilon == pytest.approx(EPSILON)
    assert result.passes(), str(result)


def test_audit_detects_noise_that_ignores_the_truncation(monkeypatch: pytest.MonkeyPatch, audit_runs: int | None) -> None:
    monkeypatch.setattr(RaceToTheTop, "sensitivities", property(lambda self: np.full(self.level_count, float(self.row_weight))))
    result = audit_release(audit_runs or DEFAULT_RUNS, RaceToTheTop.design(Privacy.laplace(EPSILON), largest=ROWS))
    assert not result.passes() and result.epsilon_lower_bound > 2 * EPSILON, str(result)
