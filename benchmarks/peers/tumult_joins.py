"""Tumult Analytics' answers to counts and sums over joins (run by ``benchmarks/joins.py`` and
``benchmarks/joins_real.py``).

Runs in a separate environment that has ``tmlt.analytics`` (and its PySpark, which needs Java; never a dpsql
dependency). Reads a JSON request on stdin — the folder of the tables' CSV files, each table's privacy-ID column
(null for a public table), ε and the tasks — and prints a JSON object: per task, one entry per trial of
``[group, count, sum]`` rows, and the noise each query adds as Tumult states it (``Session._noise_info``: the
mechanism and its scale); its versions go to stderr.

The privacy unit is the person: every private table is protected with ``AddRowsWithID`` in one ID space, so
Tumult hides all rows of one person, as dpsql does. A task names its private table, the table it joins and on
which columns — ``join_public`` when that table is public, ``join_private`` (along the privacy ID, which needs no
truncation strategy in Tumult's ID model) when it is private — then ``enforce(MaxRowsPerID(τ))`` (at most ``τ``
rows of each person, the excess dropped: the counterpart of dpsql's declared ``max_rows_per_unit``). Each trial
is two queries at ε/2 each (Tumult answers one aggregate per query): ``count()`` and ``sum(measure, low, high)``
grouped by a public ``KeySet`` of the task's categories. One Session holds the budget of every trial; Spark runs
on one local core.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path

from tmlt.analytics import AddRowsWithID, KeySet, MaxRowsPerID, PureDPBudget, QueryBuilder, Session

from tumult_spark import local_spark


def main() -> None:
    request = json.load(sys.stdin)
    folder, epsilon, tasks = Path(request["data"]), request["epsilon"], request["tasks"]
    spark = local_spark()
    frames = {name: spark.read.csv(str(folder / f"{name}.csv"), header=True, inferSchema=True) for name in request["tables"]}
    builder = Session.Builder().with_privacy_budget(PureDPBudget(epsilon * sum(task["trials"] for task in tasks))).with_id_space("units")
    for name, unit in request["tables"].items():
        if unit is not None:
            builder = builder.with_private_dataframe(name, frames[name], protected_change=AddRowsWithID(unit, id_space="units"))
    session = builder.build()
    released: dict[str, list[list[list[float]]]] = {}
    noise: dict[str, dict[str, list[object]]] = {}
    for task in tasks:
        group, (low, high) = task["group"], task["bounds"]
        keys = KeySet.from_dict({group: task["categories"]})
        joined = QueryBuilder(task["table"])
        if request["tables"][task["join"]] is None:
            joined = joined.join_public(frames[task["join"]], join_columns=task["on"])
        else:
            joined = joined.join_private(task["join"], join_columns=task["on"])
        bounded = joined.enforce(MaxRowsPerID(int(task["truncation"])))
        queries = (bounded.groupby(keys).count(name="n"), bounded.groupby(keys).sum(task["measure"], low, high, name="s"))
        for column, query in zip(("n", "s"), queries):  # Tumult's own account of its noise, before any trial
            (info,) = session._noise_info(query, PureDPBudget(epsilon / 2))
            noise.setdefault(task["name"], {})[column] = [info["noise_mechanism"].name, float(info["noise_parameter"])]
        runs = []
        for _ in range(task["trials"]):
            rows: dict[object, dict[str, float]] = {}
            for query in queries:
                for row in session.evaluate(query, PureDPBudget(epsilon / 2)).collect():
                    values = row.asDict()
                    rows.setdefault(values[group], {}).update({k: float(values[k]) for k in ("n", "s") if k in values})
            runs.append([[key, values["n"], values["s"]] for key, values in rows.items()])
        released[task["name"]] = runs
    print(json.dumps({"released": released, "noise": noise}))
    print(f"tmlt.analytics {version('tmlt.analytics')}, tmlt.core {version('tmlt.core')}, pyspark {version('pyspark')}; count and sum at ε/2 each", file=sys.stderr)
    spark.stop()


if __name__ == "__main__":
    main()
