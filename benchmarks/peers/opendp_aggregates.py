"""OpenDP's answer to SUM and AVG by group (its Polars context; run by ``benchmarks/aggregates.py``).

Runs in a separate environment that has ``opendp[polars]`` (never a dpsql dependency). Reads the same JSON
request as ``snsql_aggregates.py`` on stdin and prints a JSON list, one entry per trial, of ``[*group
values, sum, avg]`` rows; its version goes to stderr. One query per trial at the total ε: a bounded sum
and a count per group (OpenDP splits ε evenly between the two), AVG = sum/count clamped to the bounds
(the midpoint when the count is not positive); the group keys are public (a margin with
``invariant="keys"``, so nothing is thresholded), one row per unit.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

import opendp.prelude as dp
import polars as pl
from shared_table import read_table  # beside this script: on sys.path when it runs


def main() -> None:
    request = json.load(sys.stdin)
    groups, column = request["groups"], request["column"]
    sum_only = request.get("sum_only", False)  # one SUM query (a grouping set of a CUBE answered on its own)
    low, high = request["bounds"]
    data = read_table(request["data"], [*groups, column])
    frame = pl.LazyFrame(data).with_columns(pl.col(column).cast(pl.Int64))
    dp.enable_features("contrib")
    margin = dp.polars.Margin(by=groups, invariant="keys", max_length=len(data))  # max_length: an overflow bound OpenDP needs for sums
    trials = []
    for _ in range(request["trials"]):
        context = dp.Context.compositor(
            data=frame,
            privacy_unit=dp.unit_of(contributions=1),
            privacy_loss=dp.loss_of(epsilon=request["epsilon"]),
            split_evenly_over=1,
            margins=[margin],
        )
        total_expression = pl.col(column).fill_null(0).dp.sum((low, high)).alias("s")
        expressions = [total_expression] if sum_only else [total_expression, dp.len(signed=False).alias("n")]
        query = context.query().group_by(groups).agg(*expressions) if groups else context.query().select(*expressions)
        released = query.release().collect()
        rows = []
        for row in released.iter_rows(named=True):
            total = float(row["s"])
            if sum_only:
                rows.append([*(int(row[g]) for g in groups), total, None])
                continue
            count = row["n"]
            average = min(max(total / count, low), high) if count > 0 else (low + high) / 2
            rows.append([*(int(row[g]) for g in groups), total, average])
        trials.append(rows)
    print(json.dumps(trials))
    print(f"opendp {version('opendp')}", file=sys.stderr)


if __name__ == "__main__":
    main()
