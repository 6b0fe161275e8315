"""Tumult Analytics' answer to SUM and AVG by group (run by ``benchmarks/aggregates.py``).

Runs in a separate environment that has ``tmlt.analytics`` (and its PySpark, which needs Java; never a dpsql
dependency). Reads the same JSON request as ``snsql_aggregates.py`` (plus the declared ``categories`` of
the group columns) on stdin and prints a JSON list, one entry per trial, of ``[*group values, sum, avg]``
rows; its versions go to stderr. Tumult 0.21 answers one aggregate per query (no query returns a sum and an
average together), so each trial evaluates two queries at ε/2 each: ``groupby(KeySet).sum(column, low,
high)`` and ``groupby(KeySet).average(column, low, high)`` — the latter spends its ε/2 as ε/4 on a noisy sum
of the midpoint-shifted values and ε/4 on a noisy count (tmlt.core's average measurement). The group keys
are public (a ``KeySet`` of the declared categories), one row per unit (``AddOneRow``), values clamped to
the bounds by Tumult. One Session holds the budget of every trial (ε × trials), which is the same as a
fresh Session of ε per trial. Spark runs on one local core.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

from tmlt.analytics import AddOneRow, KeySet, PureDPBudget, QueryBuilder, Session

from tumult_spark import local_spark, request_frame


def main() -> None:
    request = json.load(sys.stdin)
    groups, column = request["groups"], request["column"]
    low, high = request["bounds"]
    epsilon, trials = request["epsilon"], request["trials"]
    spark = local_spark()
    frame = request_frame(spark, request)
    session = Session.from_dataframe(privacy_budget=PureDPBudget(epsilon * trials), source_id="t", dataframe=frame, protected_change=AddOneRow())
    sum_only = request.get("sum_only", False)  # one SUM query at ε (a grouping set of a CUBE answered on its own)
    grouped = QueryBuilder("t").groupby(KeySet.from_dict({g: [int(v) for v in request["categories"][g]] for g in groups})) if groups else QueryBuilder("t")
    queries = {"sum": grouped.sum(column=column, low=low, high=high, name="s")}
    if not sum_only:
        queries["avg"] = grouped.average(column=column, low=low, high=high, name="a")
    half = PureDPBudget(epsilon / len(queries))
    released = []
    for _ in range(trials):
        rows: dict[tuple[int, ...], dict[str, float]] = {}
        for query in queries.values():
            for row in session.evaluate(query, half).collect():
                values = row.asDict()
                rows.setdefault(tuple(int(values[g]) for g in groups), {}).update({k: float(values[k]) for k in ("s", "a") if k in values})
        released.append([[*key, values["s"], values.get("a")] for key, values in rows.items()])
    print(json.dumps(released))
    print(f"tmlt.analytics {version('tmlt.analytics')}, tmlt.core {version('tmlt.core')}, pyspark {version('pyspark')}; {'a sum at ε' if sum_only else 'sum and average at ε/2 each'}", file=sys.stderr)
    spark.stop()


if __name__ == "__main__":
    main()
