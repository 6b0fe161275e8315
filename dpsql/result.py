"""Released answers → result rows: every cell of the GROUP BY domain, then ORDER BY / LIMIT.

Counts are released as floats: the consistent (least-squares) estimates are not integers, and
rounding them would break consistency across cells and subtotals. Each count carries its standard
error; group-key columns carry None in the errors. ORDER BY, OFFSET and LIMIT apply to the released
rows (post-processing, free of privacy cost). Without ORDER BY, rows come in domain order of the
GROUP BY columns (the first varies slowest). NULL keys sort last in both directions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpsql.sql.compile import CompiledQuery
from dpsql.sql.parse import GroupKey
from dpsql.types import NUMBER, STRING

Row = tuple[object, ...]


@dataclass(frozen=True)
class Result:
    description: tuple[tuple[object, ...], ...]
    rows: list[Row]
    errors: list[Row]


def build_result(
    compiled: CompiledQuery, values: Sequence[np.ndarray], variances: Sequence[np.ndarray]
) -> Result:
    """Rows for every group cell from the per-product answers ``values``/``variances``."""
    cells = compiled.group_cells
    shape = compiled.group_shape
    key_cells = np.unravel_index(np.arange(cells), shape) if shape else ()
    columns: list[list[object]] = []
    error_columns: list[list[object]] = []
    for item, rows in zip(compiled.query.select, compiled.counts):
        if isinstance(item, GroupKey):
            labels = compiled.columns[item.column].labels()
            position = compiled.group_columns.index(item.column)
            columns.append([labels[i] for i in key_cells[position]])
            error_columns.append([None] * cells)
            continue
        value = np.zeros(cells)
        variance = np.zeros(cells)
        if rows is not None:
            flat = np.ravel_multi_index(tuple(rows.keys.T), shape) if shape else np.zeros(len(rows.keys), dtype=int)
            value[flat] = values[rows.index]
            variance[flat] = variances[rows.index]
            zeros = compiled.structural_zeros.ravel()
            value[zeros], variance[zeros] = 0.0, 0.0
        columns.append([float(v) for v in value])
        error_columns.append([float(e) for e in np.sqrt(np.maximum(variance, 0.0))])
    rows_out = list(zip(*columns)) if columns else []
    errors_out = list(zip(*error_columns)) if columns else []
    rows_out, errors_out = _post_process(compiled, rows_out, errors_out)
    return Result(_description(compiled), rows_out, errors_out)


def _post_process(compiled: CompiledQuery, rows: list[Row], errors: list[Row]) -> tuple[list[Row], list[Row]]:
    query = compiled.query
    order = list(range(len(rows)))
    for key in reversed(query.order_by):
        if key.descending:
            order.sort(key=lambda r: (rows[r][key.item] is not None, rows[r][key.item]), reverse=True)
        else:
            order.sort(key=lambda r: (rows[r][key.item] is None, rows[r][key.item]))
    end = None if query.limit is None else query.offset + query.limit
    chosen = order[query.offset : end]
    return [rows[i] for i in chosen], [errors[i] for i in chosen]


def _description(compiled: CompiledQuery) -> tuple[tuple[object, ...], ...]:
    """PEP 249 ``description``: (name, type_code, display_size, internal_size, precision, scale, null_ok)."""
    described = []
    for item in compiled.query.select:
        if isinstance(item, GroupKey):
            column = compiled.columns[item.column]
            declared = column.labels()[: column.value_cells]
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in declared)
            described.append((item.name, NUMBER if numeric else STRING, None, None, None, None, column.nullable))
        else:
            described.append((item.name, NUMBER, None, None, None, None, False))
    return tuple(described)
