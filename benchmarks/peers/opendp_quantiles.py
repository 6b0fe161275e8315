"""OpenDP's answer to quantiles by group (its Polars context; run by ``benchmarks/quantiles.py``).

Runs in a separate environment that has ``opendp[polars]`` (never a dpsql dependency). Reads a JSON request
on stdin — ``data`` (CSV path), ``groups``, ``column``, ``bounds`` (the declared integer range), ``quantiles``,
``epsilon``, ``trials`` — and prints a JSON list, one entry per trial, of ``[*group values, *quantiles]`` rows;
its version goes to stderr. One query at the total ε: ``.dp.quantile(alpha, candidates)`` for every fraction,
the candidates being every integer of the declared range (OpenDP divides the query's ε evenly among the
expressions, each an exponential mechanism); its measurement is built once and invoked once per trial
(fresh noise each time; building it takes seconds, invoking it milliseconds); the group keys are public
(a margin with ``invariant="keys"``, nothing thresholded), one row per unit.
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
    groups, column, fractions = request["groups"], request["column"], request["quantiles"]
    low, high = request["bounds"]
    data = read_table(request["data"], [*groups, column])
    frame = pl.LazyFrame(data).with_columns(pl.col(column).cast(pl.Int64))
    candidates = list(range(low, high + 1))
    dp.enable_features("contrib")
    margin = dp.polars.Margin(by=groups, invariant="keys", max_length=len(data))
    context = dp.Context.compositor(
        data=frame,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=request["epsilon"]),
        split_evenly_over=1,
        margins=[margin],
    )
    expressions = [pl.col(column).fill_null(low).dp.quantile(q, candidates).alias(f"q{i}") for i, q in enumerate(fractions)]
    measurement = context.query().group_by(groups).agg(*expressions).resolve()  # built once (seconds), invoked per trial
    spent = measurement.map(1)
    trials = []
    for _ in range(request["trials"]):
        released = measurement(frame).collect()
        trials.append([[*(int(row[g]) for g in groups), *(float(row[f"q{i}"]) for i in range(len(fractions)))] for row in released.iter_rows(named=True)])
    print(json.dumps(trials))
    print(f"opendp {version('opendp')}, polars {version('polars')}; epsilon per trial {spent:.6g}", file=sys.stderr)


if __name__ == "__main__":
    main()
