"""Counts and sums over joins at ε = 1: dpsql against Tumult Analytics, with the same declared bound and with dpsql
choosing the bound itself.

Data (generated, seed 2027): ``persons`` (20,000, an age band 0–5), ``visits`` of persons with skewed counts — most
persons 1–4 visits, one in ten between 20 and 300 — each at one of 40 ``clinics`` with a cost of 0–100, and the
public ``clinics`` table (its region, one of 5). The privacy unit is the person: every method hides all rows of one
person. Truth: the exact, untruncated answers.

Tasks (each releases the count of visits and the sum of their cost per group, at a total ε = 1):

* ``region``: visits ⋈ clinics (public) grouped by the clinic's region;
* ``age band``: visits ⋈ persons (private, along the person) grouped by the person's age band.

Methods:

* dpsql, declared bound ``τ`` (``max_rows_per_unit: τ`` on visits): ``SELECT g, COUNT(*), SUM(v.cost) … JOIN … GROUP
  BY g``, one statement (the count and the sum planned jointly), truncation after the join by the salted order;
* Tumult Analytics 0.21 with the same ``τ`` (``benchmarks/peers/tumult_joins.py``): persons and visits protected as
  ``AddRowsWithID`` in one ID space, ``join_public`` / ``join_private`` on the ID, ``enforce(MaxRowsPerID(τ))``, then
  ``count()`` and ``sum("cost", 0, 100)`` at ε/2 each (Tumult answers one aggregate per query). The issue that
  asked for this comparison names ``join_private`` with ``TruncationStrategy.DropExcess``: that strategy belongs to
  tables protected row by row (``AddMaxRows``), where a person's visits are not hidden together; the ID model is
  Tumult's way to protect persons, and truncates as ``DropExcess`` does (the excess rows of an ID are dropped);
* dpsql choosing the bound (``max_rows_per_unit: {auto: 1024}``): 20 % of ε on a histogram of the persons' visit
  counts by level, the bound that minimises the visits it loses plus the noise it costs, the rest measured with it;
* the same choice from R2T's noisy truncated totals (``RaceToTheTop.choose``) instead, for comparison (computed here
  from the same levels, the measurement as dpsql's at the chosen bound).

Columns: mean absolute error over groups and trials of the count and of the sum, and the ratio of Tumult's MAE
(declared bound ``τ``, or a badly chosen one) to dpsql's with a 95 % bootstrap interval over the trials of both
(Tumult takes seconds per query in Spark: its declared-bound trials are ``--tumult-trials``, the badly chosen
bounds' — errors 10–70× larger — ``--tumult-bad-trials``).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/joins.py [--trials 100] [--tumult-trials 10] [--tumult-bad-trials 3]
    # Tumult in its own environment (never a dpsql dependency), with Java:
    #   python3 -m venv /tmp/tumult && /tmp/tumult/bin/pip install tmlt.analytics   -> DPSQL_TUMULT_PYTHON
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

import dpsql
import dpsql.pipeline
from results_io import RESULTS, number_text, print_table, write_csv

HERE = Path(__file__).resolve().parent
EPSILON = 1.0
PERSONS = 20_000
CLINICS = 40
REGIONS = ("north", "south", "east", "west", "centre")
BOUNDS = (0, 100)
DECLARED = 300  # the declared bound that keeps every visit: the heaviest person has 300
BAD = (1, 4096)  # badly chosen bounds: one visit per person (most visits lost), or far above anyone (noise)


@dataclass(frozen=True)
class Task:
    name: str
    group: str  # the released group column, as Tumult names it
    sql: str  # dpsql's statement
    categories: list[object]
    table: str = "visits"  # Tumult's query: the private table, ...
    join: str = "clinics"  # ... the table it joins (public: join_public, private: join_private) ...
    on: tuple[str, ...] = ("clinic_id",)  # ... on these columns (as the CSV files Tumult reads name them) ...
    measure: str = "cost"  # ... and the summed column
    bounds: tuple[float, float] = BOUNDS


TASKS = (
    Task("region", "region", "SELECT c.region, COUNT(*) AS n, SUM(v.cost) AS s FROM visits v JOIN clinics c ON v.clinic_id = c.id GROUP BY c.region", list(REGIONS)),
    Task("age band", "age_band", "SELECT p.age_band, COUNT(*) AS n, SUM(v.cost) AS s FROM visits v JOIN persons p ON v.person_id = p.id GROUP BY p.age_band",
         list(range(6)), join="persons", on=("person_id",)),
)
PEER_TABLES = {"visits": "person_id", "persons": "person_id", "clinics": None}  # the privacy-ID column of each CSV Tumult reads


def generate(seed: int = 2027) -> dict[str, pd.DataFrame]:
    """persons, visits (skewed per person) and clinics (module doc)."""
    rng = np.random.default_rng(seed)
    heavy = rng.random(PERSONS) < 0.1
    visits_per = np.where(heavy, rng.integers(20, 301, PERSONS), rng.integers(1, 5, PERSONS))
    person = np.repeat(np.arange(PERSONS), visits_per)
    clinic = rng.integers(0, CLINICS, person.size)
    return {
        "persons": pd.DataFrame({"id": np.arange(PERSONS), "age_band": rng.integers(0, 6, PERSONS)}),
        "visits": pd.DataFrame({"person_id": person, "clinic_id": clinic, "cost": rng.integers(BOUNDS[0], BOUNDS[1] + 1, person.size)}),
        "clinics": pd.DataFrame({"id": np.arange(CLINICS), "region": [REGIONS[i % len(REGIONS)] for i in range(CLINICS)]}),
    }


def truth(data: dict[str, pd.DataFrame], task: Task) -> pd.DataFrame:
    visits = data["visits"].merge(data["clinics"].rename(columns={"id": "clinic_id"}), on="clinic_id").merge(
        data["persons"].rename(columns={"id": "person_id"}), on="person_id"
    )
    grouped = visits.groupby(task.group).agg(n=("cost", "size"), s=("cost", "sum"))
    return grouped.reindex(task.categories).fillna(0.0)


def connect(data: dict[str, pd.DataFrame], bound: object) -> dpsql.Connection:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e9), reuse=False)  # every trial measured afresh
    connection.register("clinics", data["clinics"], public=True)
    connection.register("persons", data["persons"], schema={"privacy_unit": "id", "columns": {"age_band": {"range": [0, 5]}}})
    connection.register("visits", data["visits"], schema={
        "privacy_unit": "person_id", "max_rows_per_unit": bound, "foreign_keys": {"person_id": "persons.id", "clinic_id": "clinics.id"},
        "columns": {"cost": {"bounds": list(BOUNDS)}},
    })
    return connection


def dpsql_runs(connection: dpsql.Connection, task: Task, trials: int) -> tuple[list[pd.DataFrame], list[int]]:
    """dpsql's releases on ``connection`` (reuse off: a fresh measurement each trial), then closes it; with a chosen
    bound, the bounds chosen."""
    cursor = connection.cursor()
    released, chosen = [], []
    for _ in range(trials):
        cursor.execute(task.sql, epsilon=EPSILON)
        released.append(pd.DataFrame(cursor.fetchall(), columns=[task.group, "n", "s"]).set_index(task.group))
        explanation = str(cursor.explanation)
        if "rows per unit chosen:" in explanation:
            chosen.append(int(explanation.split("rows per unit chosen:")[1].split()[0]))
    connection.close()
    return released, chosen


def r2t_choice(data: dict[str, pd.DataFrame], task: Task, trials: int) -> list[int]:
    """The bound R2T's choice would take on the same truncated totals: its levels at the choice's share of ε, each
    level's total the statement's rows kept at that bound, the penalty dpsql's measurement pays per unit of bound."""
    import planner
    from dpsql.schema import CHOICE_SHARE

    connection = connect(data, {"auto": 1024})
    session = connection._session
    prepared = dpsql.pipeline.prepare(session, dpsql.pipeline.execute_request(session, task.sql, None, EPSILON, None, None))
    chosen = prepared.chosen
    assert chosen is not None
    r2t = planner.RaceToTheTop.design(planner.Privacy.laplace(EPSILON * CHOICE_SHARE), largest=1024, row_weight=chosen.weight)
    counts = data["visits"].person_id.value_counts().to_numpy()
    totals = np.array([np.minimum(counts, t).sum() * chosen.weight for t in r2t.truncations], dtype=np.int64)
    connection.close()
    return [r2t.choose(totals, chosen.choice.penalty * chosen.weight) for _ in range(trials)]


@dataclass(frozen=True)
class PeerRuns:
    """A peer's releases of one (task, bound) and the expected absolute error of its noise per released count and
    sum, from the noise scale the peer states (no sampling error)."""

    released: list[pd.DataFrame]
    expected: tuple[float, float]


def expected_absolute_noise(mechanism: str, scale: float) -> float:
    """``E|X|`` of Tumult's noise: Laplace of scale ``b`` → ``b``; geometric (two-sided, ``P(k) ∝ e^{−|k|/b}``) →
    ``2q/(1 − q²)`` with ``q = e^{−1/b}``."""
    if mechanism == "LAPLACE":
        return scale
    q = float(np.exp(-1.0 / scale))
    return 2 * q / (1 - q * q)


def tumult_runs(folder: Path, tables: dict[str, str | None], runs: list[tuple[Task, int, int]]) -> dict[tuple[str, int], PeerRuns]:
    """Tumult's releases for every (task, bound, trials), from ONE run of the peer (one Spark session) over the CSV
    files ``folder/<table>.csv`` (``tables``: each one's privacy-ID column, None when public); empty when no peer
    environment is given. The peer's raw answer is kept in ``results/`` beside the tables."""
    python = os.environ.get("DPSQL_TUMULT_PYTHON")
    if not python:
        print("  (Tumult Analytics skipped: set DPSQL_TUMULT_PYTHON)", file=sys.stderr)
        return {}
    names = {f"{task.name}, τ = {bound}": (task, bound, trials) for task, bound, trials in runs}
    request = {"data": str(folder), "epsilon": EPSILON, "tables": tables,
               "tasks": [{"name": name, "group": task.group, "truncation": bound, "categories": task.categories, "trials": trials,
                          "table": task.table, "join": task.join, "on": list(task.on), "measure": task.measure, "bounds": list(task.bounds)}
                         for name, (task, bound, trials) in names.items()]}
    done = subprocess.run([python, str(HERE / "peers" / "tumult_joins.py")], input=json.dumps(request), capture_output=True, text=True, check=True)
    print(f"  {done.stderr.strip().splitlines()[-1]}", file=sys.stderr)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{folder.name.rsplit('-', 1)[0]}.tumult.json").write_text(done.stdout)
    answer = json.loads(done.stdout)
    return {(task.name, bound): PeerRuns(
                [pd.DataFrame(rows, columns=[task.group, "n", "s"]).set_index(task.group) for rows in answer["released"][name]],
                tuple(expected_absolute_noise(*answer["noise"][name][column]) for column in ("n", "s")))  # type: ignore[arg-type]
            for name, (task, bound, _) in names.items()}


def trial_errors(exact: pd.DataFrame, released: list[pd.DataFrame]) -> np.ndarray:
    """Per trial, the mean absolute error over the groups of the count and of the sum: shape (trials, 2)."""
    return np.array([np.abs(frame.reindex(exact.index).fillna(0.0).astype(float) - exact)[["n", "s"]].mean().to_numpy() for frame in released])


def mae(exact: pd.DataFrame, released: list[pd.DataFrame]) -> tuple[float, float]:
    count, total = trial_errors(exact, released).mean(axis=0)
    return float(count), float(total)


def ratio_interval(theirs: np.ndarray, mine: np.ndarray, draws: int = 4000) -> list[str]:
    """95 % percentile-bootstrap intervals of MAE(theirs) / MAE(mine), count and sum, resampling each side's
    trials (the trials are independent; groups within a trial share nothing but the data)."""
    rng = np.random.default_rng(0)
    a = theirs[rng.integers(0, len(theirs), (draws, len(theirs)))].mean(axis=1)
    b = mine[rng.integers(0, len(mine), (draws, len(mine)))].mean(axis=1)
    low, high = np.percentile(a / b, [2.5, 97.5], axis=0)
    return [f"[{lo:.2f}, {hi:.2f}]" for lo, hi in zip(low, high)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--tumult-trials", type=int, default=10, help="Tumult's trials at the declared bound")
    parser.add_argument("--tumult-bad-trials", type=int, default=3, help="Tumult's trials at each badly chosen bound (errors 10-70x larger)")
    arguments = parser.parse_args()
    data = generate()
    counts = data["visits"].person_id.value_counts()
    print(f"{len(data['visits']):,} visits of {PERSONS:,} persons; visits per person: median {int(counts.median())}, "
          f"99th percentile {int(counts.quantile(0.99))}, max {int(counts.max())}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="dpsql-joins-") as folder:
        for name, frame in data.items():  # the keys as Tumult joins them: persons.person_id, clinics.clinic_id
            frame.rename(columns={"id": {"persons": "person_id", "clinics": "clinic_id"}.get(name, "id")}).to_csv(Path(folder) / f"{name}.csv", index=False)
        peer = tumult_runs(Path(folder), PEER_TABLES, [(task, bound, arguments.tumult_trials if bound == DECLARED else arguments.tumult_bad_trials)
                                                       for task in TASKS for bound in (DECLARED, *BAD)])
        for task in TASKS:
            exact = truth(data, task)
            declared, _ = dpsql_runs(connect(data, DECLARED), task, arguments.trials)
            auto, chosen = dpsql_runs(connect(data, {"auto": 1024}), task, arguments.trials)
            mine, chosen_mae = mae(exact, declared), mae(exact, auto)
            r2t_bounds = r2t_choice(data, task, arguments.trials)
            r2t_runs = [run for bound, times in Counter(r2t_bounds).items() for run in dpsql_runs(connect(data, bound), task, times)[0]]
            rows.append([task.name, f"dpsql, declared τ = {DECLARED}", arguments.trials, *mine, *BLANK])
            rows.append([task.name, f"dpsql, chosen (median τ = {int(np.median(chosen))})", arguments.trials, *chosen_mae, *BLANK])
            rows.append([task.name, f"dpsql, chosen by R2T (median τ = {int(np.median(r2t_bounds))})", arguments.trials, *mae(exact, r2t_runs), *BLANK])
            for bound in (DECLARED, *BAD) if peer else ():
                runs, label = (declared, "dpsql declared") if bound == DECLARED else (auto, "dpsql chosen")
                rows.append(peer_row(task.name, f"Tumult, τ = {bound} (ratio to {label})", exact, peer[task.name, bound], runs, bound >= DECLARED))
    report("joins.csv", rows)


COLUMNS = ["task", "method", "trials", "count MAE", "sum MAE", "count ratio", "count 95% CI", "sum ratio", "sum 95% CI",
           "expected count ratio", "expected sum ratio"]


def peer_row(task: str, method: str, exact: pd.DataFrame, theirs: PeerRuns, mine: list[pd.DataFrame], untruncated: bool = True) -> list[object]:
    """A row of :data:`COLUMNS` for the peer's releases: its MAE's ratios to dpsql's with their intervals, then the
    ratios of the peer's expected absolute noise (from its stated scale: no sampling error on its side; exact when
    its bound drops nothing: ``untruncated``, else left out) to dpsql's MAE, each with dpsql's 95 % interval."""
    theirs_mae, mine_mae = mae(exact, theirs.released), mae(exact, mine)
    errors = trial_errors(exact, mine)
    intervals = ratio_interval(trial_errors(exact, theirs.released), errors)
    expected = ratio_interval(np.broadcast_to(np.array(theirs.expected), errors.shape), errors)
    ratios = [f"{theirs.expected[0] / mine_mae[0]:.2f} {expected[0]}", f"{theirs.expected[1] / mine_mae[1]:.2f} {expected[1]}"] if untruncated else ["", ""]
    return [task, method, len(theirs.released), *theirs_mae, theirs_mae[0] / mine_mae[0], intervals[0], theirs_mae[1] / mine_mae[1], intervals[1], *ratios]


BLANK = [None] * 6  # a dpsql row's ratio columns


def report(name: str, rows: list[list[object]]) -> None:
    """Print the rows (of :data:`COLUMNS`) as a table and write them to ``results/<name>``."""
    table = [dict(zip(COLUMNS, row)) for row in rows]
    print_table(table, COLUMNS, number_text)
    write_csv(name, table, COLUMNS)


if __name__ == "__main__":
    main()
