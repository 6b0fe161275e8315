"""Tumult Analytics' answers to counts and sums over joins (run by ``benchmarks/joins.py``).

Runs in a separate environment that has ``tmlt.analytics`` (and its PySpark, which needs Java; never a dpsql
dependency). Reads a JSON request on stdin — the folder of ``persons.csv``, ``visits.csv`` and ``clinics.csv``,
ε and the tasks, each with its truncation ``τ`` and its number of trials — and prints a JSON object: per task, one
entry per trial of ``[group, count, sum]`` rows; its versions go to stderr.

The privacy unit is the person: both private tables are protected with ``AddRowsWithID`` in one ID space
(``person_id``), so Tumult hides all rows of one person, as dpsql does. Each task is two queries at ε/2 each
(Tumult answers one aggregate per query): ``count()`` and ``sum("cost", low, high)`` grouped by a public
``KeySet``, after

* ``region``: ``join_public(clinics, join_columns=["clinic_id"])`` (the clinic's region is public), then
  ``enforce(MaxRowsPerID(τ))``;
* ``age_band``: ``join_private("persons", join_columns=["person_id"])`` (a join along the privacy ID, which
  needs no truncation strategy in Tumult's ID model), then ``enforce(MaxRowsPerID(τ))``.

``MaxRowsPerID`` keeps at most ``τ`` rows of each person (dropping the excess), the counterpart of dpsql's
declared ``max_rows_per_unit``. One Session holds the budget of every trial. Spark runs on one local core.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path

from pyspark.sql import functions as F
from tmlt.analytics import AddRowsWithID, KeySet, MaxRowsPerID, PureDPBudget, QueryBuilder, Session

from tumult_spark import local_spark


def main() -> None:
    request = json.load(sys.stdin)
    folder, epsilon = Path(request["data"]), request["epsilon"]
    spark = local_spark()
    read = lambda name: spark.read.csv(str(folder / f"{name}.csv"), header=True, inferSchema=True)  # noqa: E731
    persons = read("persons").withColumnRenamed("id", "person_id")
    visits = read("visits")
    clinics = read("clinics").withColumnRenamed("id", "clinic_id")
    tasks = request["tasks"]
    session = (
        Session.Builder()
        .with_privacy_budget(PureDPBudget(epsilon * sum(task["trials"] for task in tasks)))
        .with_id_space("persons")
        .with_private_dataframe("visits", visits, protected_change=AddRowsWithID("person_id", id_space="persons"))
        .with_private_dataframe("persons", persons, protected_change=AddRowsWithID("person_id", id_space="persons"))
        .build()
    )
    low, high = request["bounds"]
    released: dict[str, list[list[list[float]]]] = {}
    for task in tasks:
        group, truncation = task["group"], int(task["truncation"])
        keys = KeySet.from_dict({group: task["categories"]})
        if group == "region":
            joined = QueryBuilder("visits").join_public(clinics, join_columns=["clinic_id"])
        else:
            joined = QueryBuilder("visits").join_private("persons", join_columns=["person_id"])
        bounded = joined.enforce(MaxRowsPerID(truncation))
        queries = (bounded.groupby(keys).count(name="n"), bounded.groupby(keys).sum("cost", low, high, name="s"))
        runs = []
        for _ in range(task["trials"]):
            rows: dict[object, dict[str, float]] = {}
            for query in queries:
                for row in session.evaluate(query, PureDPBudget(epsilon / 2)).collect():
                    values = row.asDict()
                    rows.setdefault(values[group], {}).update({k: float(values[k]) for k in ("n", "s") if k in values})
            runs.append([[key, values["n"], values["s"]] for key, values in rows.items()])
        released[task["name"]] = runs
    print(json.dumps(released))
    print(f"tmlt.analytics {version('tmlt.analytics')}, tmlt.core {version('tmlt.core')}, pyspark {version('pyspark')}; count and sum at ε/2 each", file=sys.stderr)
    spark.stop()


if __name__ == "__main__":
    main()
