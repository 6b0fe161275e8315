"""``bounds: auto``: a row's value read as the signed *magnitude code* of its distance from a public origin.

No end of the column's range is declared, so the read cannot put values on a grid of known width. It returns
instead, per row, a bounded integer that keeps the value to a relative ``2^−20`` over every magnitude from
``2^−32`` to ``2^53`` (the largest bound dpsql accepts): with ``d = v − origin`` (``v`` clamped to the public
envelope), ``e = ⌊log₂|d|⌋`` and ``f = ⌊(|d|/2^e − 1)·2^20⌋`` (each clamped to its range, so an engine's
``LN`` rounding at a power of two moves the value by at most one code's width), the code is
``sign(d)·(1 + (e + 32)·2^20 + f)``, and 0 when ``|d| < 2^−32``. ``planner.magnitudes`` reads it back (the
middle of its code's interval), ``planner.magnitude_bins`` puts it in the clip histogram's bins, and
``planner.MagnitudeClip`` chooses each ``auto`` end from them (``dpsql.sql.clipping``).
"""

from __future__ import annotations

import numpy as np
from sqlglot import exp

import planner
from planner import LOWEST_OCTAVE, MANTISSA_BITS, OCTAVES

NULL_CODE = -(1 << 48)
"""What the answers read for a NULL value (beyond every code: ``|code| < 2^27``)."""
_LN2 = "0.6931471805599453"


def _number(value: float) -> exp.Expression:
    node = exp.Literal.number(repr(abs(float(value))))
    return exp.paren(exp.Neg(this=node)) if value < 0 else node


def _bounded(node: exp.Expression, low: float, high: float) -> exp.Expression:
    return exp.func("LEAST", exp.func("GREATEST", node, _number(low)), _number(high))


def code(value: exp.Expression, low: float, high: float, origin: float) -> exp.Expression:
    """The SQL of the row's magnitude code (module doc), NULL for NULL; ``[low, high]`` the public envelope."""
    distance = exp.Sub(this=_bounded(exp.cast(value.copy(), "DOUBLE"), low, high), expression=_number(origin))
    magnitude = exp.func("ABS", exp.paren(distance))
    smallest = 2.0**LOWEST_OCTAVE
    log2 = exp.Div(this=exp.func("LN", exp.func("GREATEST", magnitude.copy(), _number(smallest))), expression=exp.Literal.number(_LN2))
    octave = _bounded(exp.func("FLOOR", log2), LOWEST_OCTAVE, LOWEST_OCTAVE + OCTAVES - 1)
    ratio = exp.Div(this=magnitude.copy(), expression=exp.func("POWER", exp.Literal.number(2), octave.copy()))
    scaled = exp.Mul(this=exp.paren(exp.Sub(this=ratio, expression=exp.Literal.number(1))), expression=exp.Literal.number(1 << MANTISSA_BITS))
    fraction = _bounded(exp.func("FLOOR", scaled), 0, (1 << MANTISSA_BITS) - 1)
    offset = exp.Sub(this=octave, expression=_number(LOWEST_OCTAVE))
    positive = exp.Add(
        this=exp.Add(this=exp.Literal.number(1), expression=exp.Mul(this=exp.paren(offset), expression=exp.Literal.number(1 << MANTISSA_BITS))),
        expression=fraction,
    )
    signed = (
        exp.Case()
        .when(value.copy().is_(exp.null()), exp.null())
        .when(exp.LT(this=magnitude.copy(), expression=_number(smallest)), exp.Literal.number(0))
        .when(exp.LT(this=distance.copy(), expression=exp.Literal.number(0)), exp.Neg(this=exp.paren(positive.copy())))
        .else_(positive)
    )
    return exp.cast(signed, "BIGINT")


def values(codes: np.ndarray, origin: float) -> np.ndarray:
    """The values the codes stand for (NULL codes excluded by the caller)."""
    codes = np.asarray(codes, dtype=np.int64)
    return origin + np.sign(codes) * planner.magnitudes(np.abs(codes))


def histograms(codes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The rows per magnitude bin above the origin (row 0; values below it count in bin 0) and below it (row 1)."""
    codes, counts = np.asarray(codes, dtype=np.int64), np.asarray(counts, dtype=np.int64)
    size = planner.magnitude_edges().size
    return np.stack([
        np.bincount(planner.magnitude_bins(np.maximum(side * codes, 0)), weights=counts, minlength=size)[:size].astype(np.int64)
        for side in (1, -1)
    ])


def rounding(reach: float) -> float:
    """The most reading a value back from its code moves it, for values within ``reach`` of the origin."""
    return reach * 2.0**-MANTISSA_BITS + 2.0**LOWEST_OCTAVE
