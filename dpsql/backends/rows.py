"""Turn the rows a driver fetched into the columns a :class:`~dpsql.backends.base.Backend` returns."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def columns_from_rows(names: Sequence[str], rows: Sequence[Sequence[object]]) -> dict[str, np.ndarray]:
    """Columns by name; a column holding NULLs comes back as a masked array (NULL = masked), like DuckDB's.

    >>> columns_from_rows(["c0", "n"], [(1, 5), (None, 7)])["c0"]
    masked_array(data=[1, --],
                 mask=[False,  True],
           fill_value=999999)
    """
    columns: dict[str, np.ndarray] = {}
    for position, name in enumerate(names):
        values = [row[position] for row in rows]
        missing = np.array([value is None for value in values], dtype=bool)
        if not missing.any():
            columns[name] = np.array(values)
            continue
        present = [value for value in values if value is not None]
        filler = present[0] if present else 0
        columns[name] = np.ma.masked_array(np.array([filler if m else v for v, m in zip(values, missing)]), mask=missing)
    return columns
