"""OpenDP's answer to ``GROUP BY puma, sex`` with unknown keys (its Polars context): thresholded noisy counts.

Run by ``benchmarks/unknown_keys.py`` in a separate environment that has OpenDP (never a dpsql
dependency): ``python opendp_keys.py DATA.csv EPSILON DELTA TRIALS`` prints one JSON line per trial, the
released cells as ``[[puma, sex, count], ...]``, and a last line with OpenDP's version.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

import opendp.prelude as dp
import pandas as pd
import polars as pl


def main(path: str, epsilon: float, delta: float, trials: int) -> None:
    dp.enable_features("contrib")
    frame = pl.LazyFrame(pd.read_csv(path)[["PersonID", "puma", "sex"]])
    for _ in range(trials):
        context = dp.Context.compositor(
            data=frame,
            privacy_unit=dp.unit_of(contributions=1),  # one row per person in this table
            privacy_loss=dp.loss_of(epsilon=epsilon, delta=delta),
            split_evenly_over=1,
        )
        released = context.query().group_by(["puma", "sex"]).agg(dp.len()).release().collect()
        print(json.dumps([[int(p), int(s), int(n)] for p, s, n in released.iter_rows()]))
    print(json.dumps({"opendp": version("opendp")}))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
