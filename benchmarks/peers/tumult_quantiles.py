"""Tumult Analytics' answer to quantiles by group (run by ``benchmarks/quantiles.py``).

Runs in a separate environment that has ``tmlt.analytics`` (and its PySpark, which needs Java; never a dpsql
dependency). Reads the same JSON request as ``opendp_quantiles.py`` on stdin and prints a JSON list, one
entry per trial, of ``[*group values, *quantiles]`` rows; its versions go to stderr. Tumult answers one
aggregate per query, so each trial evaluates one ``groupby(KeySet).quantile(column, q, low, high)`` query per
fraction at ε / (number of fractions) — its exponential mechanism over the declared range, the group keys
public (a ``KeySet`` of the declared categories), one row per unit (``AddOneRow``). One Session holds the
budget of every trial (ε × trials), which is the same as a fresh Session of ε per trial. Spark runs on one
local core.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

from tmlt.analytics import AddOneRow, KeySet, PureDPBudget, QueryBuilder, Session

from tumult_spark import local_spark, request_frame


def main() -> None:
    request = json.load(sys.stdin)
    groups, column, fractions = request["groups"], request["column"], request["quantiles"]
    low, high = request["bounds"]
    epsilon, trials = request["epsilon"], request["trials"]
    spark = local_spark()
    frame = request_frame(spark, request)
    session = Session.from_dataframe(privacy_budget=PureDPBudget(epsilon * trials), source_id="t", dataframe=frame, protected_change=AddOneRow())
    keys = KeySet.from_dict({g: [int(v) for v in values] for g, values in request["categories"].items()})
    share = PureDPBudget(epsilon / len(fractions))
    queries = [QueryBuilder("t").groupby(keys).quantile(column=column, quantile=q, low=low, high=high, name=f"q{i}") for i, q in enumerate(fractions)]
    released = []
    for _ in range(trials):
        rows: dict[tuple[int, ...], list[float]] = {}
        for i, query in enumerate(queries):
            for row in session.evaluate(query, share).collect():
                rows.setdefault(tuple(int(row[g]) for g in groups), [0.0] * len(fractions))[i] = float(row[f"q{i}"])
        released.append([[*key, *values] for key, values in rows.items()])
    print(json.dumps(released))
    print(f"tmlt.analytics {version('tmlt.analytics')}, tmlt.core {version('tmlt.core')}, pyspark {version('pyspark')}", file=sys.stderr)
    spark.stop()


if __name__ == "__main__":
    main()
