"""Counts and sums over joins of real data at ε = 1: dpsql against Tumult Analytics with the same declared bounds.

Data (``$DPSQL_BENCH_DATA``, the benchmark data folder; its README names the sources):

* ``PUMS_dup.csv`` — 1,948 rows of California PUMS records of 1,000 persons (``pid``), 1–4 rows per person — as
  the private table ``records`` (its income), and ``PUMS_pid.csv`` — one row per person — as the private table
  ``persons`` (their education, ``educ`` 1–16), both protecting the person: private ⋈ private along the unit;
* ``PUMS_10k.csv`` — 10,000 persons with their PUMA (public-use microdata area, a public census geography code)
  — as the private table ``pums``, and a public code list derived from its PUMA codes, ``pumas`` (each code and
  its group: the code's leading two digits, 9 groups of neighbouring areas): private ⋈ public on a declared key.

Tasks (each releases the count of rows and the sum of income, clamped to ``[0, 500000]``, per group at a total
ε = 1; the truth is the exact answer on the clamped values, which the bounds keep whole):

* ``education``: ``records ⋈ persons`` grouped by the person's education, bound 4 rows per person (the most anyone has);
* ``PUMA group``: ``pums ⋈ pumas`` grouped by the PUMA group, bound 1 row per person.

Methods: dpsql, one statement (the count and the sum planned jointly) with the declared bound; Tumult Analytics
(``benchmarks/peers/tumult_joins.py``: ``join_private`` / ``join_public``, ``MaxRowsPerID(τ)``, a count and a sum
at ε/2 each). Columns as in ``benchmarks/joins.py`` (MAE over groups and trials, Tumult ÷ dpsql with a 95 %
bootstrap interval over the trials).

    OPENBLAS_NUM_THREADS=1 DPSQL_BENCH_DATA=… DPSQL_TUMULT_PYTHON=… .venv/bin/python benchmarks/joins_real.py [--trials 100] [--tumult-trials 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

import dpsql
from joins import BLANK, Task, dpsql_runs, mae, peer_row, report, tumult_runs

INCOME = (0, 500_000)
TASKS = (
    Task("education", "educ", "SELECT p.educ, COUNT(*) AS n, SUM(r.income) AS s FROM records r JOIN persons p ON r.pid = p.pid GROUP BY p.educ",
         list(range(1, 17)), table="records", join="persons", on=("pid",), measure="income", bounds=INCOME),
    Task("PUMA group", "puma_group", "SELECT g.puma_group, COUNT(*) AS n, SUM(p.income) AS s FROM pums p JOIN pumas g ON p.puma = g.puma GROUP BY g.puma_group",
         [], table="pums", join="pumas", on=("puma",), measure="income", bounds=INCOME),
)
DECLARED = {"education": 4, "PUMA group": 1}  # the most rows one person has in each task's private rows
PEER_TABLES = {"records": "pid", "persons": "pid", "pums": "PersonID", "pumas": None}


def load(folder: Path) -> dict[str, pd.DataFrame]:
    """The four tables (module doc)."""
    records = pd.read_csv(folder / "PUMS_dup.csv")[["pid", "income"]].astype({"income": "int64"})
    persons = pd.read_csv(folder / "PUMS_pid.csv")[["pid", "educ"]]
    pums = pd.read_csv(folder / "PUMS_10k.csv")[["PersonID", "puma", "income"]]
    codes = np.sort(pums.puma.unique())
    pumas = pd.DataFrame({"puma": codes, "puma_group": [f"{code // 1000}xxx" for code in codes]})
    return {"records": records, "persons": persons, "pums": pums, "pumas": pumas}


def connect(data: dict[str, pd.DataFrame], task: Task) -> dpsql.Connection:
    bound = DECLARED[task.name]
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e9), reuse=False)  # every trial measured afresh
    connection.register("pumas", data["pumas"], public=True)
    connection.register("persons", data["persons"], schema={"privacy_unit": "pid", "columns": {"educ": {"range": [1, 16]}}})
    connection.register("records", data["records"], schema={
        "privacy_unit": "pid", "max_rows_per_unit": bound, "foreign_keys": {"pid": "persons.pid"}, "columns": {"income": {"bounds": list(INCOME)}},
    })
    connection.register("pums", data["pums"], schema={
        "privacy_unit": "PersonID", "max_rows_per_unit": bound, "foreign_keys": {"puma": "pumas.puma"}, "columns": {"income": {"bounds": list(INCOME)}},
    })
    return connection


def truth(data: dict[str, pd.DataFrame], task: Task) -> pd.DataFrame:
    """The exact answer on the clamped incomes: the task's own SQL in DuckDB over the tables with income clamped."""
    database = duckdb.connect()
    for name, frame in data.items():
        database.register(name, frame.assign(income=frame.income.clip(*INCOME)) if "income" in frame else frame)
    exact = database.execute(task.sql).df()
    database.close()
    return exact.set_index(task.group).astype(float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--tumult-trials", type=int, default=10)
    arguments = parser.parse_args()
    folder = os.environ.get("DPSQL_BENCH_DATA")
    if not folder:
        sys.exit("set DPSQL_BENCH_DATA to the benchmark data folder (PUMS_dup.csv, PUMS_pid.csv, PUMS_10k.csv)")
    data = load(Path(folder))
    tasks = [Task(**{**t.__dict__, "categories": sorted(data["pumas"].puma_group.unique())}) if not t.categories else t for t in TASKS]
    print(f"records: {len(data['records']):,} rows of {data['records'].pid.nunique():,} persons; pums: {len(data['pums']):,} persons in "
          f"{len(data['pumas'])} PUMAs, {len(tasks[1].categories)} groups")
    rows = []
    with tempfile.TemporaryDirectory(prefix="dpsql-joins-real-") as scratch:
        for name, frame in data.items():
            frame.to_csv(Path(scratch) / f"{name}.csv", index=False)
        peer = tumult_runs(Path(scratch), PEER_TABLES, [(task, DECLARED[task.name], arguments.tumult_trials) for task in tasks])
        for task in tasks:
            exact = truth(data, task)
            mine, _ = dpsql_runs(connect(data, task), task, arguments.trials)
            rows.append([task.name, f"dpsql, declared τ = {DECLARED[task.name]}", arguments.trials, *mae(exact, mine), *BLANK])
            if peer:
                rows.append(peer_row(task.name, f"Tumult, τ = {DECLARED[task.name]}", exact, peer[task.name, DECLARED[task.name]], mine))
    report("joins_real.csv", rows)


if __name__ == "__main__":
    main()
