"""Euclidean projection onto bounded simplices, one column at a time (McKenna et al. 2020, Algorithm 1).

The projection of a column `v` onto `{q : lower ≤ q ≤ upper, Σ q = total}` is `clip(v + λ, lower, upper)`
with the scalar `λ` that makes the sum `total` (docs/math.md §8). `f(λ) = Σ clip(v + λ, lower, upper)` is
piecewise linear and non-decreasing, so `λ` is found by Newton steps `λ ← λ − (f(λ) − total) / #free`
(exact once the free set is right) safeguarded by bisection on a bracket, for all columns at once;
a final step solves for `λ` exactly on the free set. Starting near a feasible point — as projected
gradient descent does — this takes a handful of vectorized passes.
"""

from __future__ import annotations

import numpy as np

MAX_ITERATIONS = 200
NEWTON_TOLERANCE = 1e-15


def project_bounded_simplex(
    values: np.ndarray, lower: np.ndarray, upper: np.ndarray, total: float | np.ndarray = 1.0
) -> np.ndarray:
    """Project every column of `values` (shape `m × k`) onto `{lower ≤ q ≤ upper, Σ q = total}`.

    `lower` and `upper` broadcast against `values` (a length-`m` vector applies to every column) and
    must satisfy `Σ lower ≤ total ≤ Σ upper` per column, else `ValueError`.
    """
    values = np.asarray(values, dtype=float)
    lower, upper = _as_column_bounds(lower), _as_column_bounds(upper)
    totals = np.broadcast_to(np.asarray(total, dtype=float), (values.shape[1],))
    lower_sum = np.broadcast_to(lower, values.shape).sum(axis=0)
    upper_sum = np.broadcast_to(upper, values.shape).sum(axis=0)
    slack = 1e-12 * np.maximum(1.0, np.abs(totals))
    if np.any(lower_sum > totals + slack) or np.any(upper_sum < totals - slack) or np.any(lower > upper):
        raise ValueError("infeasible bounded simplex: need lower ≤ upper and Σ lower ≤ total ≤ Σ upper per column")

    tolerance = NEWTON_TOLERANCE * values.shape[0] * np.maximum(1.0, np.abs(totals))
    low = (lower - values).min(axis=0)  # f(low) = Σ lower ≤ total
    high = (upper - values).max(axis=0)  # f(high) = Σ upper ≥ total
    shift = np.clip((totals - values.sum(axis=0)) / values.shape[0], low, high)
    for _ in range(MAX_ITERATIONS):
        shifted = values + shift
        clipped = _clip(shifted, lower, upper)
        error = clipped.sum(axis=0) - totals
        if np.all(np.abs(error) <= tolerance):
            break
        low = np.where(error < 0, shift, low)
        high = np.where(error > 0, shift, high)
        free = ((shifted > lower) & (shifted < upper)).sum(axis=0)
        newton = shift - np.divide(error, free, out=np.zeros_like(error), where=free > 0)
        usable = (free > 0) & (newton > low) & (newton < high)
        shift = np.where(error == 0, shift, np.where(usable, newton, 0.5 * (low + high)))
    else:
        shifted = values + shift
        clipped = _clip(shifted, lower, upper)
    # exact finish: move the free entries by the one scalar that makes each sum exact
    free = (shifted > lower) & (shifted < upper)
    free_count = free.sum(axis=0)
    correction = np.divide(totals - clipped.sum(axis=0), free_count, out=np.zeros_like(totals), where=free_count > 0)
    return _clip(clipped + free * correction, lower, upper)


def _clip(values: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """`np.clip` without its slow path for broadcast bounds."""
    return np.minimum(np.maximum(values, lower), upper)


def _as_column_bounds(bound: np.ndarray) -> np.ndarray:
    """A bound that broadcasts against `m × k` values: a vector is one bound per row, for all columns."""
    array = np.asarray(bound, dtype=float)
    return array.reshape(-1, 1) if array.ndim == 1 else array


def project_row_minima(z: np.ndarray, epsilon: float) -> np.ndarray:
    """Project the row-minimum vector `z` onto `{z ≥ 0, e^{-ε} ≤ Σ z ≤ 1}`, where `Q` columns can exist."""
    clipped = np.maximum(z, 0.0)
    low, high = float(np.exp(-epsilon)), 1.0
    target = min(max(clipped.sum(), low), high)
    if target == clipped.sum():
        return clipped
    column = z.reshape(-1, 1)
    return project_bounded_simplex(column, np.zeros(z.size), np.full(z.size, target), target)[:, 0]
