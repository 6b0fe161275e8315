"""Statistics of the privacy audits (tests/audit/, docs/audit.md): lower confidence bounds on the
privacy loss a mechanism shows on two neighbouring datasets.

A mechanism is (ε, δ)-DP when, for every event E and both orders of the neighbours D, D',
``P[M(D) ∈ E] ≤ e^ε P[M(D') ∈ E] + δ``. From ``n`` runs on each dataset, the Clopper–Pearson
intervals of the two probabilities give, with confidence 1 − α, a lower bound on the δ the mechanism
needs at ``ε``: ``low(P[M(D) ∈ E]) − e^ε · high(P[M(D') ∈ E])``. An audit passes when that bound is at
most the claimed δ (0 under pure DP) for every event of a family fixed in advance; the Bonferroni split
of α over the events and both directions makes the chance of failing a correct mechanism (a false
alarm) at most α.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import optimize, stats

import planner.noise
import dpsql.bounded_tables
import dpsql.sql.bounded
from dpsql.sql.bounded_rows import bounded_rows

FALSE_ALARM_RATE = 1e-3  # per audit


def clopper_pearson(hits: int, runs: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper–Pearson bounds: P ≥ low and P ≤ high, each with confidence 1 − alpha."""
    low = 0.0 if hits == 0 else float(stats.beta.ppf(alpha, hits, runs - hits + 1))
    high = 1.0 if hits == runs else float(stats.beta.ppf(1 - alpha, hits + 1, runs - hits))
    return low, high


@dataclass(frozen=True)
class AuditResult:
    """What the outputs show: lower confidence bounds on the δ needed at ``epsilon`` and on ε at ``delta``."""

    epsilon: float  # the ε the δ bound is taken at (the claim's)
    delta: float  # the claimed δ the ε bound is taken at
    delta_lower_bound: float
    epsilon_lower_bound: float
    worst_event: str

    def passes(self) -> bool:
        return self.delta_lower_bound <= self.delta

    def __str__(self) -> str:
        return (
            f"at epsilon = {self.epsilon:.4g} the outputs need delta >= {self.delta_lower_bound:.4g} (claimed {self.delta:.4g}); "
            f"at the claimed delta, epsilon >= {self.epsilon_lower_bound:.4g} (event {self.worst_event})"
        )


def audit(
    events_on_first: np.ndarray, events_on_second: np.ndarray, names: Sequence[str], epsilon: float, delta: float = 0.0,
    alpha: float = FALSE_ALARM_RATE,
) -> AuditResult:
    """Audit a claimed (ε, δ) from boolean event indicators (runs × events) on two neighbouring datasets."""
    first, second = np.atleast_2d(events_on_first), np.atleast_2d(events_on_second)
    share = alpha / (2 * 2 * first.shape[1])  # two bounds per comparison, both directions, every event
    delta_bound, epsilon_bound, worst = -math.inf, -math.inf, ""
    for index, name in enumerate(names):
        for (a, b), direction in (((first, second), ""), ((second, first), " (reversed)")):
            low, _ = clopper_pearson(int(a[:, index].sum()), a.shape[0], share)
            _, high = clopper_pearson(int(b[:, index].sum()), b.shape[0], share)
            needed = low - math.exp(epsilon) * high
            shown = math.log((low - delta) / high) if low > delta and high > 0 else (math.inf if low > delta else -math.inf)
            if needed > delta_bound:
                delta_bound, worst = needed, name + direction
            epsilon_bound = max(epsilon_bound, shown)
    return AuditResult(epsilon, delta, delta_bound, epsilon_bound, worst)


def zcdp_delta(rho: float, epsilon: float) -> float:
    """The δ at which ρ-zCDP implies (ε, δ)-DP (Canonne, Kamath, Steinke 2020, Proposition 12):
    inf over α > 1 of exp((α − 1)(αρ − ε)) / (α − 1) · (1 − 1/α)^α."""

    def log_delta(alpha: float) -> float:
        return (alpha - 1) * (alpha * rho - epsilon) - math.log(alpha - 1) + alpha * math.log1p(-1 / alpha)

    best = optimize.minimize_scalar(log_delta, bounds=(1 + 1e-9, 1e4), method="bounded", options={"xatol": 1e-10})
    return min(1.0, math.exp(best.fun))


# -- deliberately broken releases, each audit must catch one --------------------------------------------------


def half_laplace_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Discrete Laplace noise at half the scale the plan charged for."""
    original = planner.noise.discrete_laplace
    monkeypatch.setattr(planner.noise, "discrete_laplace", lambda scale, size=None, rng=None: original(np.asarray(scale) / 2, size, rng))


def half_gaussian_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Discrete Gaussian noise with half the standard deviation."""
    original = planner.noise.discrete_gaussian
    monkeypatch.setattr(planner.noise, "discrete_gaussian", lambda sigma2, size=None, rng=None: original(np.asarray(sigma2) / 4, size, rng))


def half_ridge_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ridge pairs (and the rows outside pairs) at half the scale."""
    original = planner.noise.discrete_ridge_pairs
    monkeypatch.setattr(planner.noise, "discrete_ridge_pairs", lambda scale, h, count, rng=None: original(scale / 2, h // 2, count, rng))
    half_laplace_noise(monkeypatch)


def no_contribution_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounded rows without their bound: every row of a unit is kept and counted (whether they are
    kept in the backend or computed within the statement)."""
    def unbounded(table, columns, column_types, privacy_unit, max_rows_per_unit, salt, row_columns, **options):  # type: ignore[no-untyped-def]
        return bounded_rows(table, columns, column_types, privacy_unit, 2**31 - 1, salt, row_columns, **options)

    for module in (dpsql.bounded_tables, dpsql.sql.bounded):
        monkeypatch.setattr(module, "bounded_rows", unbounded)
