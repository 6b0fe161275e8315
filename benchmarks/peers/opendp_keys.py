"""OpenDP's answer to ``GROUP BY puma, sex`` with unknown keys (its Polars context): thresholded noisy counts.

Run by ``benchmarks/unknown_keys.py`` in a separate environment that has OpenDP (never a dpsql
dependency): ``python opendp_keys.py DATA.csv EPSILON DELTA TRIALS [COLUMNS [VALUE LOW HIGH]]`` prints one JSON line
per trial, the released cells as ``[[puma, sex, count], ...]`` (``COLUMNS``, comma-separated, default ``puma,sex``),
and a last line with OpenDP's version. With ``VALUE``, each cell also gets the noisy sum of that column clamped to
``[LOW, HIGH]`` (NULL as 0), ``[[puma, educ, count, sum], ...]``: one query, ``agg(dp.len(), col.dp.sum(...))``, whose
budget OpenDP splits between the count (which also selects the keys) and the sum; a group's rows are bounded by the
table's size (``max_length``, public), which OpenDP asks for to bound a sum's float error.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

import opendp.prelude as dp
import pandas as pd
import polars as pl


def main(path: str, epsilon: float, delta: float, trials: int, columns: list[str], value: tuple[str, float, float] | None) -> None:
    dp.enable_features("contrib")
    table = pd.read_csv(path)
    frame = pl.LazyFrame(table[["PersonID", *columns, *([value[0]] if value else [])]])
    margins = [dp.polars.Margin(by=columns, max_length=len(table))] if value else []
    aggregates = [dp.len()] + ([pl.col(value[0]).fill_null(0).dp.sum((int(value[1]), int(value[2])))] if value else [])
    for _ in range(trials):
        context = dp.Context.compositor(
            data=frame,
            privacy_unit=dp.unit_of(contributions=1),  # one row per person in this table
            privacy_loss=dp.loss_of(epsilon=epsilon, delta=delta),
            split_evenly_over=1,
            margins=margins,
        )
        released = context.query().group_by(columns).agg(*aggregates).release().collect()
        print(json.dumps([[int(v) for v in row] for row in released.iter_rows()]))
    print(json.dumps({"opendp": version("opendp")}))


if __name__ == "__main__":
    summed = (sys.argv[6], float(sys.argv[7]), float(sys.argv[8])) if len(sys.argv) > 8 else None
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), (sys.argv[5] if len(sys.argv) > 5 else "puma,sex").split(","), summed)
