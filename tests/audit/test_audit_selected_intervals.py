"""Coverage of the 95 % intervals of counts whose keys were selected by thresholding their noisy counts
(``planner.selected_intervals``), through the public API; time budget about 15 s.

300 keys of 4-15 rows each (one row per unit) under Gaussian noise (ρ = 0.125 per statement: σ² = 4 per
cell, threshold 11): most keys sit near the threshold, so a released key's noise was pushed upward by the
selection. 20 seeded releases of ``GROUP BY key`` (2,658 released counts). The intervals cover the true counts of the
released keys at ≥ 95 % (minus three binomial standard errors): 98.8 %; the broken variant — the plain
noise variance, which ignores the selection and the integer lattice (the intervals before) — covers 92.2 %,
and must fail the same test.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
from dpsql import selection

RELEASES = 20
SCHEMA = {"privacy_unit": None, "columns": {"key": "unknown"}}


def _coverage(frame: pd.DataFrame) -> tuple[float, int]:
    truth = frame.groupby("key").size().to_dict()
    covered = []
    for seed in range(RELEASES):
        connection = dpsql.connect(budget=dpsql.Budget(epsilon=100.0, delta=1e-5), noise="gaussian")
        connection.register("t", frame, schema=SCHEMA)
        with dpsql.testing.seeded(seed):
            cursor = connection.cursor().execute("SELECT key, COUNT(*) FROM t GROUP BY key", rho=0.125)
        assert "threshold = 11" in cursor.explanation
        for (key, _), (_, (low, high)) in zip(cursor.fetchall(), cursor.confidence_interval(0.95)):
            covered.append(low <= truth[key] <= high)
        connection.close()
    return float(np.mean(covered)), len(covered)


@pytest.fixture(scope="module")
def keys() -> pd.DataFrame:
    counts = np.random.default_rng(6).integers(4, 16, 300)
    return pd.DataFrame({"key": np.repeat(np.arange(300), counts)})


def _passes(rate: float, released: int) -> bool:
    return rate >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / released)


def test_intervals_of_selected_keys_cover_at_the_nominal_rate(keys: pd.DataFrame) -> None:
    rate, released = _coverage(keys)
    assert released > 1000 and _passes(rate, released), (rate, released)


def test_the_plain_noise_variance_fails_the_same_test(keys: pd.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    def plain(rule, workload, product, full, axis, values):  # noqa: ANN001, ANN202 - the broken variant
        return rule.cell_variance * np.asarray(selection.row_norms2_over(product, workload.domain.attributes))

    monkeypatch.setattr(selection, "_selected_variances", plain)
    rate, released = _coverage(keys)
    assert not _passes(rate, released), (rate, released)
