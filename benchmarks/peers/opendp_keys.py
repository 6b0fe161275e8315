"""OpenDP's answer to ``GROUP BY puma, sex`` with unknown keys (its Polars context): thresholded noisy counts.

Run by ``benchmarks/unknown_keys.py`` in a separate environment that has OpenDP (never a dpsql
dependency): ``python opendp_keys.py DATA.csv EPSILON DELTA TRIALS [COLUMNS]`` prints one JSON line per trial,
the released cells as ``[[puma, sex, count], ...]`` (``COLUMNS``, comma-separated, default ``puma,sex``), and a
last line with OpenDP's version.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

import opendp.prelude as dp
import pandas as pd
import polars as pl


def main(path: str, epsilon: float, delta: float, trials: int, columns: list[str]) -> None:
    dp.enable_features("contrib")
    frame = pl.LazyFrame(pd.read_csv(path)[["PersonID", *columns]])
    for _ in range(trials):
        context = dp.Context.compositor(
            data=frame,
            privacy_unit=dp.unit_of(contributions=1),  # one row per person in this table
            privacy_loss=dp.loss_of(epsilon=epsilon, delta=delta),
            split_evenly_over=1,
        )
        released = context.query().group_by(columns).agg(dp.len()).release().collect()
        print(json.dumps([[*(int(v) for v in row[:-1]), int(row[-1])] for row in released.iter_rows()]))
    print(json.dumps({"opendp": version("opendp")}))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), (sys.argv[5] if len(sys.argv) > 5 else "puma,sex").split(","))
