"""SUM, AVG, VARIANCE and STDDEV as linear queries over one data vector with the counts.

A statement (or batch) that aggregates a column ``v`` with bounds ``[lo, hi]`` adds one attribute to its
domain, the column's *moment cells*. Each row's value is clamped to ``[lo, hi]`` and rounded to the
public grid ``lo + j·(hi−lo)/R`` (``j = 0..R``). The grid follows the values the column can hold, never the
bounds' type alone (:func:`value_grid`): when the column's type puts its values on a lattice of spacing ``r``
(``r = 1`` for an integer column or an integer ``range``, ``10^-s`` for ``DECIMAL(p, s)``), both bounds lie on
it and they are at most :data:`GRID` steps apart, ``R = (hi − lo)/r`` and every value is a grid point
(exact); otherwise — a DOUBLE column, whatever its bounds — ``R =`` :data:`GRID` and rounding is to the nearest
grid point, ties up, so each value moves by at most ``(hi−lo)/(2R)`` (:attr:`ValueEncoding.rounding`, stated
in EXPLAIN and added to every error bar). With ``u = j/R``, a row then splits a weight of
``scale`` integer units over the cells:

* SUM and AVG only (``moments = 1``, ``scale = R``): ``(R − j, j)`` — ``x_lo += R(1 − u)``, ``x_hi += R·u``;
* with VARIANCE or STDDEV (``moments = 2``, ``scale = R²``): ``(R(R − j), j(R − j), j²)`` — the
  weights ``1 − u``, ``u(1 − u)``, ``u²`` (non-negative, summing to 1) times ``R²``;
* a column that may hold NULL (bounds only, or a ``nullable`` domain) has one more cell, which a NULL
  row fills with its whole weight (SQL semantics: SUM, AVG, VARIANCE and STDDEV ignore NULLs,
  ``COUNT(*)`` counts the row) — except for SUM alone of a column whose grid holds 0 (``null_as_zero``):
  there a NULL row adds to the SUM exactly what a 0 adds, nothing, and ``COUNT(*)`` counts it either way, so
  it is encoded as the value 0 and needs no cell of its own (on a fine grid ``C`` then counts it too, which
  only widens the rounding bound ``C·rounding`` by rows that are not rounded: still a bound). The cell is not
  free: each measured cell carries its own noise, and ``COUNT(*)`` sums all of a group's cells, so
  dropping it takes a third off the variance of ``COUNT(*)`` beside ``SUM`` of a column with bounds
  ``[0, hi]`` (two cells' noise instead of three) at no cost to the SUM.

Every cell count is an integer and each row contributes exactly ``scale`` units of L1 mass, so the
sensitivity of every strategy is the count's times ``scale`` (``plan(..., contributions = k·scale)``)
and, in count units (answers divided by ``scale``), the noise is that of a count: one unit of weight
per row. Per group, the linear queries (in rows of the block) are ``C = Σ weights``, ``U = Σu`` and
``Q = Σu²``: row ``k`` of the block sums the cells from ``k`` on. The block also holds the pairwise
sums of those rows, whose variances give the covariances (``Cov(a, b) = (Var(a+b) − Var a − Var b)/2``)
the delta method needs. With ``w = hi − lo``: ``SUM = lo·C + w·U``, ``AVG = lo + w·U/C``,
``VAR_POP = w²(Q/C − (U/C)²)``, ``VAR_SAMP = w²(Q − U²/C)/(C − 1)``, ``STDDEV = √VAR`` — docs/math.md
§12 gives the standard errors, the bias at small counts and the rounding bound each error includes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
import sqlglot
from sqlglot import exp

from dpsql.table import HIDDEN_SOURCE, matching_columns
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.schema import MAX_VALUE_BOUND, Schema
from dpsql.sql.bounded_expressions import derive, resolved
from dpsql.sql import magnitudes
from dpsql.sql.parse import Aggregate, Count

GRID = 4096
"""Grid steps (``R``) for a column whose values are not on a lattice of at most this many steps between
its bounds (a DOUBLE column, or bounds wider than this many steps of its resolution)."""
CLIP_BASE = 1 << 22
"""``clip: auto``: values are read as indices on this many steps of the bounds (integer bounds closer: one per integer)."""
SECOND_MOMENT = ("VAR_SAMP", "VAR_POP", "STDDEV_SAMP", "STDDEV_POP")
Z95 = NormalDist().inv_cdf(0.975)


@dataclass(frozen=True)
class ValueEncoding:
    """The moment cells of one aggregated column (module doc)."""

    column: str  # the table's spelling
    low: float
    high: float
    grid: int  # R
    moments: int  # 1: SUM/AVG; 2: also VARIANCE/STDDEV
    null_cell: bool  # the column may hold NULL: a last cell for NULL rows
    exact: bool = True  # every value the column can hold is a grid point (module doc)
    sum_only: bool = False  # the statement asks SUM alone of an exactly gridded column: one query per group (module doc)
    null_as_zero: bool = False  # SUM alone (with or without COUNT(*)), 0 on the grid: a NULL row is encoded as 0 (module doc)
    clip_base: int = 0  # ``clip: auto``: values are read as indices on this many steps over [low, high] (0: no clip)
    clipped_rows: float = 0.0  # after a clip: the clipped rows the error bars assume, and ...
    clipped_excess: float = 0.0  # ... how far above the clip each lies, in clip widths (``dpsql.sql.clipping``)
    base_rounding: float = 0.0  # after a clip: the most the base grid moved a value before the clip's grid did
    expression: str | None = None  # an aggregated expression: its SQL over clamped columns (``dpsql.sql.bounded_expressions``)
    auto_ends: tuple[bool, bool] = (False, False)  # ``bounds: auto``: the ends chosen privately (``dpsql.sql.magnitudes``)
    resolution: float | None = None  # ``bounds: auto``: the values' spacing (the column type's), the least clip considered

    @property
    def reads_index(self) -> bool:
        """The read returns each row's value as an index (``clip: auto``, ``bounds: auto``), not its cell weights:
        the cells follow the clip chosen after the read."""
        return bool(self.clip_base) or any(self.auto_ends)

    @property
    def null_index(self) -> int:
        """What :meth:`cell_weights` reads for a NULL value."""
        return magnitudes.NULL_CODE if any(self.auto_ends) else -1

    @property
    def origin(self) -> float:
        """``bounds: auto``: the point distances are coded from — the declared end, or 0 when both are auto."""
        return self.high if self.auto_ends == (True, False) else self.low if self.auto_ends == (False, True) else 0.0

    @property
    def rounding(self) -> float:
        """The most one value moves when rounded to the grid: 0 when exact, else ``(hi − lo)/(2R)`` (after a
        clip, plus the base grid's)."""
        return 0.0 if self.exact else (self.high - self.low) / (2 * self.grid) + self.base_rounding

    @property
    def attribute(self) -> str:
        """The domain attribute of the moment cells (no table column can be spelt so by a statement)."""
        return f"{self.column}#moments"

    @property
    def scale(self) -> int:
        """Integer units of weight one row spreads over the cells."""
        return self.grid**self.moments

    @property
    def cells(self) -> int:
        return self.moments + 1 + int(self.null_cell)

    @property
    def base_rows(self) -> int:
        """``C``, ``U`` (and ``Q``)."""
        return self.moments + 1

    @property
    def cells_key(self) -> ValueEncoding:
        """What the cells mean, whatever the block asks of them: kept measurements are filed under it."""
        return dataclasses.replace(self, sum_only=False)

    @property
    def sum_scale(self) -> float:
        """SUM alone: the block's one row is ``SUM/sum_scale`` in count units (``max(|lo|, |hi|)``, at least 1)."""
        return max(abs(self.low), abs(self.high), 1e-300)

    def block(self) -> np.ndarray:
        """The queries per group over the cells: ``C, U[, Q]`` then their pairwise sums; SUM alone: the SUM
        itself, ``(lo·x_lo + hi·x_hi)/max(|lo|, |hi|)`` (in count units), the one query the plan then prices."""
        if self.sum_only:
            row = np.zeros((1, self.cells))
            row[0, :2] = (self.low / self.sum_scale, self.high / self.sum_scale)
            return row
        base = np.zeros((self.base_rows, self.cells))
        for k in range(self.base_rows):
            base[k, k : self.base_rows] = 1.0
        pairs = [base[a] + base[b] for a in range(self.base_rows) for b in range(a + 1, self.base_rows)]
        return np.vstack([base, *pairs])

    def describe(self) -> str:
        kind = "sums" if self.moments == 1 else "sums, squares"
        null = " (one for NULL)" if self.null_cell else " (NULL counted as 0: SUM ignores it)" if self.null_as_zero else ""
        if any(self.auto_ends):
            return (f"{self.column}: {kind} of values clamped to the clips chosen below (bounds: auto; each value read to a relative "
                    f"2^-{magnitudes.MANTISSA_BITS} of its distance from {self.origin:g}) on {self.grid + 1} grid points of their width; "
                    f"{self.cells} cells{null}, {self.scale} units per row")
        rounding = "exact" if self.exact else f"each value within {self.rounding:.3g}, in every error"
        derived = " (bounds by interval arithmetic from the columns' declared bounds)" if self.expression is not None else ""
        return (
            f"{self.column}: {kind} of values clamped to [{self.low:g}, {self.high:g}]{derived} on {self.grid + 1} grid points ({rounding}); "
            f"{self.cells} cells{null}, {self.scale} units per row"
        )

    # -- SQL ---------------------------------------------------------------------------------------------
    def read(self) -> exp.Expression:
        """The aggregated value of a bounded row: its column, or its expression over the clamped columns."""
        return exp.column(self.column, quoted=True) if self.expression is None else _value_sql(self.expression)

    def _step(self, value: exp.Expression, steps: int) -> exp.Expression:
        """The value clamped to the bounds as the index of its nearest point (ties up: the same in every
        engine) on ``steps`` steps of them; NULL for NULL (the index of 0 with ``null_as_zero``)."""
        low, high = float(self.low), float(self.high)
        if self.null_as_zero:
            value = exp.func("COALESCE", value.copy(), exp.Literal.number(0))
        clamped = exp.func("LEAST", exp.func("GREATEST", exp.cast(value.copy(), "DOUBLE"), _number(low)), _number(high))
        offset = exp.Div(
            this=exp.Mul(this=exp.paren(exp.Sub(this=clamped, expression=_number(low))), expression=exp.Literal.number(steps)),
            expression=_number(high - low),
        )
        step = exp.cast(exp.func("FLOOR", exp.Add(this=offset, expression=exp.Literal.number("0.5"))), "BIGINT")
        return exp.Case().when(value.copy().is_(exp.null()), exp.null()).else_(step)

    def weights(self, value: exp.Expression) -> list[exp.Expression]:
        """Per cell, the integer weight a row with ``value`` puts there (module doc)."""
        j = self._step(value, self.grid)
        grid = exp.Literal.number(self.grid)

        def rest() -> exp.Expression:
            return exp.paren(exp.Sub(this=grid.copy(), expression=j.copy()))

        if self.moments == 1:
            parts: list[exp.Expression] = [rest(), j.copy()]
        else:
            parts = [exp.Mul(this=grid.copy(), expression=rest()), exp.Mul(this=j.copy(), expression=rest()), exp.Mul(this=j.copy(), expression=j.copy())]
        weights = [exp.func("COALESCE", part, exp.Literal.number(0)) for part in parts]
        if self.null_cell:
            weights.append(exp.Case().when(value.copy().is_(exp.null()), exp.Literal.number(self.scale)).else_(exp.Literal.number(0)))
        return weights

    # -- clip: auto (``dpsql.sql.clipping``) ------------------------------------------------------------
    def index(self, value: exp.Expression) -> exp.Expression:
        """The row's value clamped to the bounds as an index on the base grid (nearest point, ties up), NULL
        for NULL: ``clip: auto`` reads these and computes the moment cells of the chosen clip after the read.
        ``bounds: auto``: the signed magnitude code of its distance from :attr:`origin` instead."""
        if any(self.auto_ends):
            return magnitudes.code(value, self.low, self.high, self.origin)
        return self._step(value, self.clip_base)

    def histogram(self, indices: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The rows per bin the clip's mechanism reads (``indices`` of :meth:`index`, NULLs left out): per
        base-grid index; ``bounds: auto``: per magnitude bin above the origin, then below it (two rows)."""
        if any(self.auto_ends):
            return magnitudes.histograms(indices, counts)
        histogram = np.zeros(self.clip_base + 1, dtype=np.int64)
        np.add.at(histogram, np.minimum(indices, self.clip_base), counts)
        return histogram

    def cell_weights(self, indices: np.ndarray, clip: int | tuple[float, float]) -> np.ndarray:
        """Per row (its base-grid index, -1 for NULL), the integer weights over the cells for values clamped to
        the base-grid point ``clip`` (≥ 1) and gridded on ``grid`` steps of ``[low, clip]`` (nearest, ties up);
        ``bounds: auto``: ``clip`` the chosen ``(low, high)``, the values read back from their codes."""
        index = np.asarray(indices, dtype=np.int64)
        if isinstance(clip, tuple):
            null = index == self.null_index
            low, high = clip
            values = np.clip(magnitudes.values(np.where(null, 0, index), self.origin), low, high)
            j = np.clip(np.floor((values - low) / (high - low) * self.grid + 0.5), 0, self.grid).astype(np.int64)
        else:
            null = index < 0
            j = (2 * self.grid * np.minimum(np.maximum(index, 0), clip) + clip) // (2 * clip)
        rest = self.grid - j
        parts = [rest, j] if self.moments == 1 else [self.grid * rest, j * rest, j * j]
        weights = np.stack([np.where(null, 0, p) for p in parts], axis=-1)
        if self.null_cell:
            weights = np.concatenate([weights, np.where(null, self.scale, 0)[..., None]], axis=-1)
        return weights

    def clipped(self, clip: int, rows: float, excess: float) -> ValueEncoding:
        """The encoding whose answers read the cells of the clip ``clip`` (a base-grid index): ``high`` there;
        its error bars add the bias of ``rows`` clipped rows each ``excess`` clip widths above it."""
        high = self.low + (self.high - self.low) * clip / self.clip_base
        return dataclasses.replace(self, high=high, clip_base=0, clipped_rows=rows, clipped_excess=excess)

    def bounded(self, low: float, high: float, rows: float, excess: float) -> ValueEncoding:
        """``bounds: auto``: the encoding whose answers read the cells of the chosen ``[low, high]``, its error
        bars with the bias of ``rows`` clipped rows each ``excess`` widths beyond, and the codes' rounding."""
        reach = max(abs(low - self.origin), abs(high - self.origin))
        return dataclasses.replace(self, low=low, high=high, auto_ends=(False, False), resolution=None, clipped_rows=rows, clipped_excess=excess,
                                   base_rounding=magnitudes.rounding(reach))

    def _released_sum(self, values: np.ndarray, variances: np.ndarray) -> tuple[list[float | None], list[float | None]]:
        """SUM alone: each group's answer scaled back, its standard error with the clipping bias (no count is
        measured on its own here, so a group's share of the clipped rows is taken as equal)."""
        sums = np.asarray(values, dtype=float)[:, 0] * self.sum_scale
        errors = np.sqrt(np.maximum(np.asarray(variances, dtype=float)[:, 0], 0.0)) * self.sum_scale
        if self.clipped_rows:
            errors = np.sqrt(errors**2 + (self.clipped_rows / len(sums) * self.clipped_excess * (self.high - self.low)) ** 2)
        return [float(v) for v in sums], [float(e) for e in errors]

    def _clipping_bias(self, function: str, count: float, total: float) -> float:
        """The error bars' estimate of the clipping bias of one group's aggregate (``count`` its estimated rows,
        ``total`` those of every group of the branch): its share of the clipped rows, each ``clipped_excess``
        widths above the clip — for SUM ``rows·excess·w``, AVG that per row, the variances the excess of squares."""
        if not self.clipped_rows or total <= 0:
            return 0.0
        width, share = self.high - self.low, max(count, 0.0) / total
        if function == "SUM":
            return self.clipped_rows * share * self.clipped_excess * width
        per_row = self.clipped_rows / total
        if function == "AVG":
            return per_row * self.clipped_excess * width
        return per_row * ((1 + self.clipped_excess) ** 2 - 1) * width**2

    # -- answers -----------------------------------------------------------------------------------------
    def released(self, function: str, values: np.ndarray, variances: np.ndarray) -> tuple[list[float | None], list[float | None]]:
        """Per group, the aggregate and its error from the block's answers in count units
        (``values``/``variances``: groups × block rows): the delta-method standard error plus the most the
        grid's rounding can move the aggregate (:meth:`rounding_bound`), so ``value ± z·error`` holds that
        bias at any ``z ≥ 1``; after a clip, the estimated clipping bias in quadrature. Never fails: a group
        whose estimated count leaves the aggregate undefined gets None."""
        if self.sum_only:  # the block is the SUM itself (in count units of sum_scale); its grid is exact
            return self._released_sum(values, variances)
        b = self.base_rows
        estimates = values[:, :b]
        covariance = np.zeros((len(values), b, b))
        for k in range(b):
            covariance[:, k, k] = variances[:, k]
        pair = b
        for first in range(b):
            for second in range(first + 1, b):
                shared = (variances[:, pair] - variances[:, first] - variances[:, second]) / 2
                covariance[:, first, second] = covariance[:, second, first] = shared
                pair += 1
        out: list[float | None] = []
        errors: list[float | None] = []
        with np.errstate(all="ignore"):
            total = float(np.sum(np.maximum(estimates[:, 0], 0.0)))
        for estimate, cov in zip(estimates, covariance):
            with np.errstate(all="ignore"):  # float arithmetic on any estimate: overflow gives inf, never an error
                value, gradient, root = _function(function, estimate.astype(np.float64), self.low, self.high)
                if value is None or gradient is None or not math.isfinite(value):
                    out.append(None)
                    errors.append(None)
                    continue
                bias = self._clipping_bias(function.replace("STDDEV", "VAR"), float(estimate[0]), total)
                variance = max(float(np.nan_to_num(gradient @ cov @ gradient, nan=np.inf)), 0.0) + bias**2
                error = math.sqrt(variance)
                if root:  # STDDEV = √VAR: se(√V) ≈ se(V) / (2√V); at 0 the band [0, √(z·se(V))] (z at 95 %), as a 95 % error
                    error = float(error / (2 * value)) if value > 0 else math.sqrt(Z95 * error) / Z95
            out.append(float(value))
            errors.append(error + self.rounding_bound(function, float(value), float(estimate[0])))
        return out, errors

    def rounding_bound(self, function: str, value: float, count: float) -> float:
        """The most rounding every value by at most ``δ`` (:attr:`rounding`) moves the aggregate of a group of
        ``count`` values whose released aggregate is ``value``: SUM ``δ·C``, AVG ``δ``; the standard deviation
        is a norm of the centred values, so it moves by at most ``δ`` (POP) or ``δ·√(C/(C − 1))`` (SAMP), and
        the variance ``s²`` by at most ``δ′(2s + δ′)`` (docs/math.md §12)."""
        step = self.rounding
        if step == 0.0:
            return 0.0
        count = max(count, 0.0)
        if function == "SUM":
            return step * count
        if function == "AVG":
            return step
        spread = step * math.sqrt(count / (count - 1)) if function.endswith("SAMP") and count > 1 else step
        if function.startswith("STDDEV"):
            return spread
        return spread * (2 * math.sqrt(max(value, 0.0)) + spread)


@functools.lru_cache(maxsize=256)
def _parsed_value(text: str) -> exp.Expression:
    return sqlglot.parse_one(text, dialect="duckdb")


def _value_sql(text: str) -> exp.Expression:
    return exp.paren(_parsed_value(text).copy())


def _number(value: float) -> exp.Expression:
    """A float literal; a negative one in parentheses (``x - (-1.5)``, never ``x - -1.5``)."""
    node = exp.Literal.number(repr(abs(float(value))))
    return exp.paren(exp.Neg(this=node)) if value < 0 else node


def _function(function: str, estimate: np.ndarray, low: float, high: float) -> tuple[float | None, np.ndarray | None, bool]:
    """(value, gradient over C, U[, Q], whether the value is the square root of the differentiated one)."""
    width = np.float64(high - low)
    count, total = estimate[0], estimate[1]  # numpy scalars: arithmetic on them cannot raise
    square = estimate[2] if len(estimate) > 2 else np.float64(0.0)
    gradient = np.zeros(len(estimate))
    if function == "COUNT":  # COUNT(column) of a column with bounds but no declared domain: its non-NULL rows, C
        gradient[0] = 1.0
        return count, gradient, False
    if function == "SUM":
        gradient[0], gradient[1] = low, width
        return low * count + width * total, gradient, False
    if count <= 0:
        return None, None, False
    if function == "AVG":
        gradient[0], gradient[1] = -width * total / count**2, width / count
        return low + width * min(max(total / count, 0.0), 1.0), gradient, False
    root = function.startswith("STDDEV")
    if function.endswith("POP"):
        variance = width**2 * max(square / count - (total / count) ** 2, 0.0)
        gradient[:] = width**2 * np.array([-square / count**2 + 2 * total**2 / count**3, -2 * total / count**2, 1 / count])
    else:
        if count <= 1:
            return None, None, False
        centred = square - total**2 / count
        variance = width**2 * max(centred, 0.0) / (count - 1)
        gradient[:] = width**2 * np.array(
            [(total / count) ** 2 / (count - 1) - centred / (count - 1) ** 2, -2 * total / (count * (count - 1)), 1 / (count - 1)]
        )
    return (math.sqrt(variance) if root else variance), gradient, root


class MomentNeed(NamedTuple):
    """What one aggregate reads from the moment cells: the value it aggregates (the table's spelling of a column, or an
    expression's text), its function, whether the value is an expression, and the bounds the statement gives it."""

    value: str
    function: str
    expression: bool = False
    bounds: tuple[float, float] | None = None


def encoding_for(needs: Iterable[MomentNeed], schema: Schema, zero_nulls: bool = True) -> ValueEncoding | None:
    """The moment cells the aggregates' needs ask for (None when there are none; each kind says what its items need,
    ``dpsql.sql.kinds.weights``). One aggregated column per statement or batch; the column must have bounds (declared,
    or an integer range). ``zero_nulls=False`` keeps the NULL cell where ``null_as_zero`` would drop it (to read a
    measurement kept with that cell)."""
    found: dict[str, set[str]] = {}
    given: set[tuple[float, float]] = set()  # bounds the statements give (Google's contribution_bounds_per_group)
    expressions: set[str] = set()  # the aggregated values that are expressions (``dpsql.sql.bounded_expressions``)
    for need in needs:
        found.setdefault(need.value, set()).add(need.function)
        expressions |= {need.value} if need.expression else set()
        if need.bounds is not None:
            given.add(need.bounds)
    if not found:
        return None
    if len(found) > 1:
        raise NotSupportedError(
            f"SELECT: {sorted(found)} each need moment cells of their own in one part of the statement: COUNT(column) of a column "
            "with bounds but no declared domain counts that column's moment cells; send that COUNT in a statement of its own"
        )
    column, functions = next(iter(found.items()))
    sum_only = functions == {"SUM"}
    if len(given) > 1:
        raise NotSupportedError(
            f"SELECT: the aggregates of {column!r} give different contribution bounds {sorted(given)}; give the same bounds to all"
        )
    if column in expressions:
        return _expression_encoding(column, functions, schema, next(iter(given)) if given else None)
    domain = schema.column(column)
    bounds = next(iter(given)) if given else domain.value_bounds
    auto_ends = (False, False) if given else domain.auto_ends
    if bounds is None and domain.is_date_range:
        raise NotSupportedError(
            f"SELECT {sorted(functions)[0]}({column}): column {column!r} holds days, which have no sum or average here; ask for "
            f"MIN, MAX or QUANTILE_DISC of it, or the aggregate of a number (e.g. of EXTRACT(day FROM {column}) in a view)"
        )
    if bounds is None:
        raise NotSupportedError(
            f"SELECT {sorted(functions)[0]}({column}): column {column!r} has no bounds; declare them in the schema, e.g. "
            f"{column}: {{bounds: [lo, hi]}} — values are clamped to them (they must not come from the data)"
        )
    low, high = bounds
    _check_magnitude(column, functions, low, high)
    moments = 2 if functions & set(SECOND_MOMENT) else 1
    null_cell = domain.nullable or not domain.is_known
    if any(auto_ends):  # both ends (or one) chosen after the read from the values' magnitude codes
        if domain.value_resolution is None:
            raise NotSupportedError(
                f"SELECT {sorted(functions)[0]}({column}): bounds: auto needs a column type that fixes the values' spacing "
                f"(an integer or DECIMAL column), and {column!r} has none; declare a public envelope instead, e.g. "
                f"{column}: {{bounds: [lo, hi], clip: auto}}, or cast it to an integer or DECIMAL type"
            )
        return ValueEncoding(column, float(low), float(high), GRID, moments, null_cell, exact=False, auto_ends=auto_ends,
                             resolution=domain.value_resolution)
    if domain.clip:  # the clip's width is decided after the read: the grid is always GRID steps of it
        whole = all(float(b).is_integer() for b in bounds) and high - low <= CLIP_BASE
        base = int(high - low) if whole else CLIP_BASE
        exact_base = whole and domain.value_resolution == 1
        return ValueEncoding(column, float(low), float(high), GRID, moments, null_cell, exact=False, clip_base=base,
                             base_rounding=0.0 if exact_base else (high - low) / (2 * base))
    grid, exact = value_grid(low, high, domain.value_resolution)
    zero_on_grid = low <= 0 <= high and (Fraction(-low) * grid) % Fraction(high - low) == 0
    null_as_zero = zero_nulls and sum_only and null_cell and zero_on_grid
    sum_only = sum_only and exact
    return ValueEncoding(column, float(low), float(high), grid, moments, null_cell and not null_as_zero, exact, sum_only=sum_only,
                         null_as_zero=null_as_zero)


def _expression_encoding(text: str, functions: set[str], schema: Schema, given: tuple[float, float] | None) -> ValueEncoding:
    """The moment cells of an aggregated expression: its interval by interval arithmetic over the declared domains
    (or the statement's own contribution bounds), its SQL over clamped columns (``dpsql.sql.bounded_expressions``).
    It may be NULL on any row (a CASE without ELSE, a nullable column): it always has a NULL cell."""
    derived = derive(text, schema.column, sorted(functions)[0])
    low, high = given if given is not None else (derived.low, derived.high)
    _check_magnitude(text, functions, low, high)
    grid, exact = value_grid(low, high, derived.resolution if given is None else None)
    moments = 2 if functions & set(SECOND_MOMENT) else 1
    return ValueEncoding(text, float(low), float(high), grid, moments, True, exact, sum_only=functions == {"SUM"} and exact, expression=derived.sql)


def _check_magnitude(column: str, functions: set[str], low: float, high: float) -> None:
    if max(abs(low), abs(high)) > MAX_VALUE_BOUND:
        raise NotSupportedError(
            f"SELECT {sorted(functions)[0]}({column}): the bounds [{low}, {high}] of {column!r} (its range or bins) lie beyond "
            f"±2^53 ({MAX_VALUE_BOUND:.3g}), where sums of bounded values lose exactness and can overflow; declare "
            f"{column}: {{bounds: [lo, hi]}} within that, e.g. in larger units"
        )


def value_grid(low: float, high: float, resolution: float | None) -> tuple[int, bool]:
    """``(R, exact)``: ``R = (hi − lo)/r`` and exact when the column's values lie on a lattice of spacing
    ``r`` (its type's resolution; None: any real value) on which both bounds lie, at most :data:`GRID` steps
    apart; else ``(GRID, False)`` — a DOUBLE column gets the fine grid whatever its bounds."""
    if resolution is not None:
        step = Decimal(repr(float(resolution)))
        first, last = Decimal(repr(float(low))) / step, Decimal(repr(float(high))) / step
        steps = last - first
        if first == first.to_integral_value() and last == last.to_integral_value() and 0 < steps <= GRID:
            return int(steps), True
    return GRID, False


def counted_by_moments(item: Count, schema: Schema, table_columns: Sequence[str], table: str) -> bool:
    """``COUNT(column)`` of a column with bounds but no declared domain: its non-NULL rows are the moment cells'
    count ``C`` (no domain needed), released like the column's other aggregates."""
    if item.column is None or item.distinct:
        return False
    domain = schema.column(resolve(item.column, table_columns, table, "SELECT COUNT"))
    return not domain.is_known and domain.value_bounds is not None


def aggregated(item: Aggregate, table_columns: Sequence[str], table: str) -> str:
    """What an aggregate reads, as the table spells it: its column, or its expression's text with each column so."""
    clause = f"SELECT {item.function}"
    if item.expression:
        return resolved(item.column, lambda name: resolve(name, table_columns, table, clause))
    return resolve(item.column, table_columns, table, clause)


def resolve(name: str, table_columns: Sequence[str], table: str, clause: str) -> str:
    """The table's spelling of a column (``dpsql.table.matching_columns``: exact, else its one case-insensitive match,
    else in a joined relation the one source that has it)."""
    matches = matching_columns(name, table_columns)
    if len(matches) > 1:
        raise ProgrammingError(f"{clause}: column {name!r} is in several of the joined tables ({matches}); qualify it with its table's name or alias")
    if not matches:
        raise ProgrammingError(f"{clause}: unknown column {name!r}; use one of the columns of {table!r}: {list(c for c in table_columns if not c.startswith(HIDDEN_SOURCE))}")
    return matches[0]
