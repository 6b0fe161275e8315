"""Schema values as canonical Python values, whatever type the schema was written with.

A schema built from data holds numpy and pandas scalars — ``list(np.linspace(-5, 5, 11))``,
``list(df.sex.unique())``, ``[df.age.min(), df.age.max()]``. Before a schema is checked, every value it
declares is turned into the plain Python value it stands for, so that checks, SQL literals, labels and
messages see one type per kind of value, on every backend:

* booleans (``bool``, ``np.bool_``) → ``bool``;
* integers (every ``numbers.Integral``: ``np.int64``, ``np.uint8``, …) → ``int``;
* other real numbers (every ``numbers.Real``: ``np.float64``, ``np.float32``, ``Fraction``, …, and a
  finite ``Decimal``) → ``float`` (the nearest double; ``np.float32(0.1)`` is the double
  0.10000000149011612, the value it holds), or ``int`` for a whole ``Decimal``;
* ``np.datetime64`` → ``datetime.date`` at a unit of a day or coarser, else ``datetime.datetime`` (when
  the value fits microseconds); ``pandas.Timestamp`` and other ``datetime``/``date`` subclasses → the
  plain ``datetime``/``date``; NaT → None;
* text (``np.str_`` and other ``str`` subclasses) → ``str``.

Anything else is left as it is, for the schema's checks to refuse with their own message. Only the
places that hold values are converted (a list of categories, bin edges, a range, bounds, the numeric
keys), never a structure walked to any depth: a schema document can be as deep or as self-referential as
YAML anchors make it.

>>> import numpy as np
>>> canonical_values([np.float64(0.5), np.int64(2), np.bool_(True), np.datetime64("2024-01-31")])
(0.5, 2, True, datetime.date(2024, 1, 31))
"""

from __future__ import annotations

import datetime
import decimal
import numbers

import numpy as np

_DAY_UNITS = frozenset({"Y", "M", "W", "D"})
_PLAIN = frozenset({str, int, float})


def canonical_value(value: object) -> object:
    """The plain Python value ``value`` stands for (module doc); ``value`` itself when it is none of those kinds."""
    if type(value) in _PLAIN:  # already plain: most values of a long category list
        return value
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.datetime64):
        return _datetime64(value)
    if isinstance(value, datetime.datetime):
        if value != value:  # pandas' NaT
            return None
        if type(value) is datetime.datetime:
            return value
        exact = getattr(value, "nanosecond", 0) == 0
        return datetime.datetime(*value.timetuple()[:6], value.microsecond, value.tzinfo) if exact else value
    if isinstance(value, datetime.date):
        return value if type(value) is datetime.date else datetime.date(value.year, value.month, value.day)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, decimal.Decimal) and value.is_finite():
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except (OverflowError, ValueError):
            return value
    if isinstance(value, str):
        return str(value) if type(value) is not str else value
    return value


def canonical_values(values: object) -> object:
    """A list, tuple or one-dimensional array of values as a tuple of canonical values; anything else
    (a mapping, text, a nested array) unchanged, for the schema's checks to refuse."""
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            return values
        values = list(values)
    if isinstance(values, (list, tuple)):
        return tuple(canonical_value(value) for value in values)
    return values


def _datetime64(value: np.datetime64) -> object:
    if np.isnat(value):
        return None
    unit, _ = np.datetime_data(value.dtype)
    if unit in _DAY_UNITS:
        converted = value.astype("datetime64[D]").item()
    else:
        microseconds = value.astype("datetime64[us]")
        converted = microseconds.item() if microseconds == value else None  # finer than a microsecond: no datetime holds it
    return converted if isinstance(converted, datetime.date) else value  # beyond year 9999: numpy gives an int
