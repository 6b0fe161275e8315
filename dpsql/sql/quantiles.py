"""Quantiles (MEDIAN, PERCENTILE_CONT/DISC, QUANTILE, MIN, MAX) from one measured CDF per group.

A quantile of a column ``c`` with an ordered domain (an integer or date ``range``, or ``bins``) adds one
product to the workload: ``Identity`` on the GROUP BY cells ⊗ ``Prefix`` on ``c``'s cells — the
cumulative count ``F(k)`` of every cell ``k`` in every group. Every quantile of the column, any number
and any fractions, shares that one product; the planner picks its strategy (hierarchies, hats, Kronecker
factors, …) and its share of the budget jointly with the statement's counts, and least squares makes
``F`` consistent with them. Its cells are never clipped before inversion (clipping turns the noise of every
empty cell into positive mass and biases every quantile); instead each group's CDF is *projected*
(``monotone``): the weighted least-squares fit among non-decreasing, non-negative sequences, weights
1/Var F(k). The true CDF lies in that convex set, so the projection is never farther from it, in that
norm, than the least-squares CDF was — and it is the large gain for small groups (docs/math.md §13).

Inversion (post-processing, it never fails and never reads data), on the projected CDF:
``N = round(F(last value cell))``
non-NULL rows (NULLs are ignored, as in SQL), and the ``j``-th order statistic (``j = 0 .. N−1``) is
the first cell ``k`` with ``F(k) ≥ j + 1``, or the last cell if there is none. Then, as DuckDB and
PostgreSQL define them:

* ``PERCENTILE_DISC(q)`` (``QUANTILE``, ``QUANTILE_DISC``) = ``x[max(⌈q·N⌉ − 1, 0)]``, a value of the domain;
* ``PERCENTILE_CONT(q)`` (``MEDIAN`` = 0.5, ``QUANTILE_CONT``): with ``h = q·(N − 1)``,
  ``x[⌊h⌋] + (h − ⌊h⌋)·(x[⌈h⌉] − x[⌊h⌋])``;
* ``MIN`` and ``MAX`` are ``PERCENTILE_DISC(0)`` and ``(1)`` of the noisy CDF over the declared domain:
  the first cell the CDF reaches one row, and the first it reaches ``N`` rows — estimates, stated so,
  and never outside the domain.

With noise disabled this is the exact answer for a ``range`` column. A ``bins`` column answers to the
resolution of its bins: DISC, MIN and MAX give the bin (its label), CONT interpolates linearly inside the
bin that holds the rank (the grouped-data quantile). A range of days on a TIMESTAMP column answers to its days:
DISC, MIN and MAX give the midnight that starts the day holding the rank (a TIMESTAMP, never a time of the data).
A group with no rows (``N = 0``) answers NULL.

Error bars (docs/math.md §13): the *rank* standard error of a quantile at the answer's cell ``k`` is that of
``F(k) − q·N``, from the plan (``rank_block`` priced by ``Plan.variances_of``, covariance included) where
the strategy offers it, else ``√(Var F(k) + q²·Var N)`` (the covariance left out: usually conservative).
The released error is in *value* units: the values at ranks within 1.96 rank standard errors of the target
rank form the inverted 95 % band (Woodruff), and the error is the larger distance from the answer to the
band's ends ÷ 1.96 — so ``value ± 1.96·error`` holds the whole band. The band always holds the answer's own
resolution (half a value either side for a range, the whole bin for bins), so no answer shows an error of 0.
At other levels the interval is an approximation. A date's error is in days; a bin label's is around the
bin's midpoint.
"""

from __future__ import annotations

import datetime
import math
from statistics import NormalDist

import numpy as np

from dpsql.errors import NotSupportedError
from dpsql.schema import BinLabel, ColumnDomain
from dpsql.sql.parse import Quantile
from planner import Block, Explicit, Prefix, ShiftedPrefix

QUANTILE_RULE = (
    "N = the group's non-NULL rows (the CDF's last value cell, rounded), x[j] = the first cell whose CDF reaches j + 1; "
    "PERCENTILE_DISC(q) = x[max(ceil(qN) - 1, 0)], PERCENTILE_CONT(q) interpolates x at q(N - 1), MIN and MAX are the "
    "0 and 1 quantiles of the noisy CDF over the declared domain (estimates); a bins column answers to its bins"
)
BAND = NormalDist().inv_cdf(0.975)  # 1.959964…: the 95 % rank band inverted for the value error (± BAND rank SEs)
ENDPOINT_SLACK = 1e-9  # relative: value ± BAND·error keeps the band's (often integer) endpoints despite rounding
TOLERANCE = 1e-6  # least-squares answers are floats: an exact count of 7 may come back as 6.9999999
VARIANCE_FLOOR = 1e-12  # a cell measured without noise (tests) weighs 1e12 in the projection, not infinitely


def check_column(item: Quantile, domain: ColumnDomain) -> None:
    """Refuse a quantile the column's domain cannot serve (before anything is read)."""
    if not domain.is_ordered:
        raise NotSupportedError(
            f"SELECT {item.function}({item.column}): quantiles need an ordered domain, and {item.column!r} has "
            f"{domain.describe()}; declare a range (integers or dates) or bins for it in the schema"
        )
    if item.function == "PERCENTILE_CONT" and domain.is_date_range:
        returned = "the first instant of a day of the domain" if domain.is_timestamp_range else "a date of the domain"
        raise NotSupportedError(
            f"SELECT {item.function}({item.column}): interpolating between dates is not supported; use "
            f"PERCENTILE_DISC(q) WITHIN GROUP (ORDER BY ...) or QUANTILE_DISC, which return {returned}"
        )


def cdf_block(domain: ColumnDomain) -> Prefix:
    """The block measured over the column's cells (a NULL cell, last, only adds one row: the total)."""
    return Prefix(domain.size)


def rank_block(cdf: Block, domain: ColumnDomain, fraction: float) -> Block:
    """The rows ``F(k) − q·N`` of a CDF block (``Prefix``, or its rows masked by a WHERE on the column), ``N``
    its last value cell's row (the NULL cell left out): the rank error of a quantile answered at cell ``k``,
    as one block the plan can price (its variance needs the covariance of ``F(k)`` with ``N``, which
    per-query variances leave out). A plain CDF gives an implicit block (priced in ``O(n)`` per quantile
    by range strategies); a masked one its dense rows."""
    if isinstance(cdf, Prefix):
        return ShiftedPrefix(cdf.size, fraction, domain.value_cells - 1)
    matrix = cdf.matrix()
    return Explicit(matrix - fraction * matrix[domain.value_cells - 1][None, :])


def monotone(values: np.ndarray, variances: np.ndarray) -> np.ndarray:
    """Each group's CDF (rows of ``values``, over the column's value cells) projected onto the
    non-decreasing, non-negative sequences: weighted isotonic regression (pool adjacent violators,
    weights 1/Var F(k), a property of the plan), then the negative part set to 0 — which is the
    projection onto both constraints at once. A row that is not finite is left as it is."""
    from scipy.optimize import isotonic_regression  # imported when first needed: scipy.optimize costs ~0.3 s

    projected = np.array(values, dtype=float)
    weights = 1.0 / np.maximum(np.asarray(variances, dtype=float), VARIANCE_FLOOR)
    for cdf, weight in zip(projected, weights):
        if np.all(np.isfinite(cdf)) and np.all(np.isfinite(weight)) and np.any(np.diff(cdf) < 0):
            cdf[:] = isotonic_regression(cdf, weights=weight).x
    return np.where(np.isfinite(projected), np.maximum(projected, 0.0), projected)


def released(
    item: Quantile, domain: ColumnDomain, values: np.ndarray, variances: np.ndarray, rank_variances: np.ndarray | None = None,
    chosen: np.ndarray | None = None,
) -> tuple[list[object], list[float | None]]:
    """Per group (rows of ``values``/``variances``: the projected CDF over the column's value cells, from
    ``monotone``, and the least-squares CDF's variances; ``rank_variances``: ``Var(F(k) − q·N)`` per cell from
    the plan, ``rank_block``, when it can give them), the quantile and its error in value units (module doc).
    ``chosen`` (a ``range`` column answered by an exponential mechanism, ``dpsql.sql.quantile_paths``) gives
    each group's answer cell instead of the CDF's; the error then covers the CDF's rank band and that answer.
    Never fails."""
    out: list[object] = []
    errors: list[float | None] = []
    cells = domain.value_cells
    ranks = None if rank_variances is None else np.asarray(rank_variances, dtype=float)[:, :cells]
    for row, (cdf, variance) in enumerate(zip(np.asarray(values, dtype=float)[:, :cells], np.asarray(variances, dtype=float)[:, :cells])):
        total = int(round(float(cdf[-1]))) if math.isfinite(cdf[-1]) else 0
        if total <= 0 and chosen is not None:  # the mechanism answered; the noisy count bounds nothing
            value = _chosen_value(item, domain, int(chosen[row]))
            out.append(value)
            errors.append((_number(domain, domain.value_cells - 1) - _number(domain, 0)) / BAND * (1 + ENDPOINT_SLACK))
            continue
        if total <= 0:
            out.append(None)
            errors.append(None)
            continue
        rank = _target_rank(item, total)
        value = _value_at(item, domain, cdf, rank, total) if chosen is None else _chosen_value(item, domain, int(chosen[row]))
        cell = _cell_at(cdf, math.ceil(rank - TOLERANCE))
        if ranks is not None:
            rank_variance = float(ranks[row, cell])
        else:  # the covariance of F(k) with N left out: conservative
            rank_variance = float(variance[cell]) + item.fraction**2 * float(variance[-1])
        spread = BAND * math.sqrt(max(rank_variance, 0.0))
        own_low, own_high = _resolution_of(domain, cell, value)
        low = min(_position(domain, cdf, max(rank - spread, 1.0)), own_low)
        high = max(_position(domain, cdf, max(min(rank + spread, float(total)), 1.0)), own_high)
        center = _center(domain, value)
        out.append(value)
        errors.append(max(high - center, center - low) / BAND * (1 + ENDPOINT_SLACK))
    return out, errors


def _chosen_value(item: Quantile, domain: ColumnDomain, cell: int) -> object:
    """A ``range`` cell as the quantile's answer: its value (a float for PERCENTILE_CONT, as the CDF path gives)."""
    cell = min(max(cell, 0), domain.value_cells - 1)
    return float(_number(domain, cell)) if item.function == "PERCENTILE_CONT" else domain.labels()[cell]


def _resolution_of(domain: ColumnDomain, cell: int, value: object) -> tuple[float, float]:
    """What the answer cannot resolve, which its interval always holds: half a value either side for a
    ``range`` (a day for dates), the whole bin for ``bins`` — so no noisy answer shows an error of 0."""
    if domain.kind == "bins":
        return float(domain.values[cell]), float(domain.values[cell + 1])  # type: ignore[arg-type]
    center = _as_number(value)
    return center - 0.5, center + 0.5


def _center(domain: ColumnDomain, value: object) -> float:
    """The number the error is measured from: the answer, or a bin label's midpoint (as ``confidence_interval``)."""
    if isinstance(value, BinLabel):
        return (value.low + value.high) / 2
    return _as_number(value)


def _target_rank(item: Quantile, total: int) -> float:
    """The 1-based rank the quantile asks for (fractional for an interpolating quantile)."""
    if item.function == "PERCENTILE_CONT":
        return 1.0 + item.fraction * (total - 1)
    return float(max(math.ceil(item.fraction * total - TOLERANCE), 1))


def _cell_at(cdf: np.ndarray, rank: int) -> int:
    """The first cell whose cumulative count reaches ``rank`` (the last cell if none does)."""
    reached = np.flatnonzero(cdf >= rank - TOLERANCE)
    return int(reached[0]) if reached.size else len(cdf) - 1


def _value_at(item: Quantile, domain: ColumnDomain, cdf: np.ndarray, rank: float, total: int) -> object:
    if item.function != "PERCENTILE_CONT":
        return domain.labels()[_cell_at(cdf, int(rank))]
    if domain.kind == "bins":
        return _position(domain, cdf, rank)
    below = math.floor(rank + TOLERANCE)
    fraction = rank - below if rank - below > TOLERANCE else 0.0
    low = _number(domain, _cell_at(cdf, below))
    if fraction == 0.0:
        return float(low)
    high = _number(domain, _cell_at(cdf, min(below + 1, total)))
    return float(low + fraction * (high - low))


def _position(domain: ColumnDomain, cdf: np.ndarray, rank: float) -> float:
    """A value on a continuous scale for a fractional rank: a range's cell value, or inside a bin by
    linear interpolation of its rows (for error bars, and CONT on bins)."""
    cell = _cell_at(cdf, math.ceil(rank - TOLERANCE))
    if domain.kind != "bins":
        return float(_number(domain, cell))
    low_edge, high_edge = float(domain.values[cell]), float(domain.values[cell + 1])  # type: ignore[arg-type]
    before = float(cdf[cell - 1]) if cell > 0 else 0.0
    inside = float(cdf[cell]) - before
    share = (rank - before) / inside if inside > TOLERANCE else 0.5
    return low_edge + min(max(share, 0.0), 1.0) * (high_edge - low_edge)


def _number(domain: ColumnDomain, cell: int) -> float:
    """A range cell's value as a number (a date as its day ordinal)."""
    return _as_number(domain.labels()[cell])


def _as_number(label: object) -> float:
    if isinstance(label, datetime.date):
        return float(label.toordinal())
    return float(label)  # type: ignore[arg-type]
