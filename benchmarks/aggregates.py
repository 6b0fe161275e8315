"""SUM and AVG by group at ε = 1: dpsql's joint plan against the even-split baseline (and OpenDP, SmartNoise SQL, Tumult).

Tasks (same bounds, same privacy unit — one row per unit — for every method; truth = the exact SUM/AVG
of the values clamped to the bounds):

* PUMS_10k income by educ (16 groups, bounds [0, 500000], the metadata bounds of PUMS_large.yaml);
* PUMS_10k income by sex × married (4 groups);
* Adult hours-per-week by workclass (9 groups; the column holds codes 0..98, bounds [0, 98]).

Methods, each releasing SUM and AVG of every group at a total ε = 1:

* dpsql: ``SELECT g, SUM(v), AVG(v) FROM t GROUP BY g`` — one statement, the values' moment cells
  planned jointly with the counts (``dpsql.sql.moments``), discrete Laplace noise;
* even split (the peers' rule, Tumult/Google/PipelineDP): a noisy count at ε/2 and a noisy sum of the
  midpoint-shifted values ``Σ(v − mid)`` at ε/2 per group (Laplace, sensitivities 1 and (hi − lo)/2);
  SUM = shifted + mid·count, AVG = SUM/count clamped to [lo, hi] (mid when the count is not positive);
* OpenDP (optional, its own environment with ``opendp[polars]``: ``DPSQL_PEER_PYTHON``, as for
  ``unknown_keys.py``): its Polars context, a bounded sum and a count per group in one query at ε (split
  between them by OpenDP), public group keys (``benchmarks/peers/opendp_aggregates.py``);
* SmartNoise SQL (optional, its own environment: ``DPSQL_SNSQL_PYTHON``): the same SELECT at ε/2 per
  computed column (its ε is per column: SUM and COUNT, AVG derived from them), all groups released
  (``benchmarks/peers/snsql_aggregates.py``);
* Tumult Analytics (optional, its own environment with ``tmlt.analytics`` and Java: ``DPSQL_TUMULT_PYTHON``):
  one answer per aggregate, so a ``groupby(KeySet).sum`` query at ε/2 and a ``groupby(KeySet).average``
  query at ε/2 (which Tumult splits into a midpoint-shifted sum and a count at ε/4 each), public group keys
  (``benchmarks/peers/tumult_aggregates.py``); its own trial count (``--tumult-trials``, default 10: each
  Spark query takes seconds).

And one CUBE: PUMS_10k income by ``CUBE (sex, married)`` (9 cells over 4 grouping sets): dpsql's one
statement against the even split per grouping set (each of the 4 grouping sets at ε/4: sum and count at
ε/8 each) — what a tool that answers one GROUP BY per query spends on a CUBE (the peers are not run on it:
they would do the same).

Columns: mean absolute error over groups and trials, for SUM and AVG, the ratio of the baseline's (or
peer's) AVG MAE to dpsql's, and for dpsql the share of its 95 % intervals (``cursor.confidence_interval``)
that hold the exact SUM and AVG (of the clamped values; AVG over groups with rows).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/aggregates.py [--trials 200] [--tumult-trials 10]
    # peers, each in its own environment (never dpsql dependencies):
    #   python3 -m venv /tmp/peers && /tmp/peers/bin/pip install "opendp[polars]" pandas     -> DPSQL_PEER_PYTHON
    #   python3 -m venv /tmp/snsql && /tmp/snsql/bin/pip install smartnoise-sql            -> DPSQL_SNSQL_PYTHON
    #   python3 -m venv /tmp/tumult && /tmp/tumult/bin/pip install tmlt.analytics (+ Java)  -> DPSQL_TUMULT_PYTHON
    # the data: DPSQL_BENCH_DATA (default: the shared/ folder beside the repository)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

import dpsql
from dpsql_runs import released_runs
from peers.shared_table import read_table
from results_io import number_text, print_table, write_csv

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("DPSQL_BENCH_DATA", HERE.parent.parent / "shared" / "data"))  # the repository sits beside shared/
EPSILON = 1.0


@dataclass(frozen=True)
class Task:
    name: str
    file: str
    groups: tuple[str, ...]
    column: str
    bounds: tuple[int, int]
    categories: dict[str, list[int]]
    clip: bool = False  # ``clip: auto`` within the bounds (dpsql; peers get the bounds as they are)
    truth_bounds: tuple[int, int] | None = None  # what the exact answers clamp to (default: the bounds)
    declared: object = None  # dpsql's ``bounds`` instead (``auto``, ``[0, auto]``): no bounds to give the peers or the even split

    def frame(self) -> pd.DataFrame:
        return read_table(DATA / self.file, [*self.groups, self.column])

    def sql(self) -> str:
        keys = ", ".join(self.groups)
        return f"SELECT {keys}, SUM({self.column}), AVG({self.column}) FROM t GROUP BY {keys}"


TASKS = (
    Task("PUMS_10k income by educ", "PUMS_10k.csv", ("educ",), "income", (0, 500_000), {"educ": list(range(1, 17))}),
    Task("PUMS_10k income by sex × married", "PUMS_10k.csv", ("sex", "married"), "income", (0, 500_000), {"sex": [0, 1], "married": [0, 1]}),
    Task("Adult hours-per-week by workclass", "adult.csv", ("workclass",), "hours_per_week", (0, 98), {"workclass": list(range(9))}),
)
LOOSE_INCOME = (0, 10_000_000)  # what a user unsure of the data declares (every PUMS_10k income lies below 713,001)
LOOSE_HOURS = (0, 1000)
CLIP_TASKS = (  # against the exact unclipped answers: the well-chosen bounds, then loose bounds with and without clip: auto
    Task("PUMS_10k income by sex, [0, 500000]", "PUMS_10k.csv", ("sex",), "income", (0, 500_000), {"sex": [0, 1]}, truth_bounds=LOOSE_INCOME),
    Task("PUMS_10k income by sex, [0, 10000000] clip: auto", "PUMS_10k.csv", ("sex",), "income", LOOSE_INCOME, {"sex": [0, 1]}, clip=True),
    Task("Adult hours-per-week by workclass, [0, 98]", "adult.csv", ("workclass",), "hours_per_week", (0, 98), {"workclass": list(range(9))},
         truth_bounds=LOOSE_HOURS),
    Task("Adult hours-per-week by workclass, [0, 1000] clip: auto", "adult.csv", ("workclass",), "hours_per_week", LOOSE_HOURS,
         {"workclass": list(range(9))}, clip=True),
    Task("PUMS_10k income by sex, bounds: [0, auto]", "PUMS_10k.csv", ("sex",), "income", LOOSE_INCOME, {"sex": [0, 1]}, declared=[0, "auto"]),
    Task("PUMS_10k income by sex, bounds: auto", "PUMS_10k.csv", ("sex",), "income", LOOSE_INCOME, {"sex": [0, 1]}, declared="auto"),
    Task("Adult hours-per-week by workclass, bounds: [0, auto]", "adult.csv", ("workclass",), "hours_per_week", LOOSE_HOURS,
         {"workclass": list(range(9))}, declared=[0, "auto"]),
    Task("Adult hours-per-week by workclass, bounds: auto", "adult.csv", ("workclass",), "hours_per_week", LOOSE_HOURS,
         {"workclass": list(range(9))}, declared="auto"),
)


def truth(task: Task, data: pd.DataFrame) -> pd.DataFrame:
    """Exact SUM and AVG of the clamped values per group, over every group of the declared domain."""
    low, high = task.truth_bounds or task.bounds
    clamped = data.assign(v=data[task.column].clip(low, high))
    if len(task.groups) == 1:
        index = pd.Index(task.categories[task.groups[0]], name=task.groups[0])
    else:
        index = pd.MultiIndex.from_product([task.categories[g] for g in task.groups], names=list(task.groups))
    grouped = clamped.groupby(list(task.groups)).v.agg(["sum", "count"]).reindex(index, fill_value=0)
    return grouped.assign(avg=grouped["sum"] / grouped["count"].where(grouped["count"] > 0))


def dpsql_trials(task: Task, data: pd.DataFrame, trials: int) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """dpsql's releases and their 95 % intervals (``cursor.confidence_interval``), per trial."""
    schema = {
        "privacy_unit": None,
        "columns": {
            **{g: {"categories": c} for g, c in task.categories.items()},
            task.column: {"bounds": list(task.bounds) if task.declared is None else task.declared, **({"clip": "auto"} if task.clip else {})},
        },
    }
    released, intervals = [], []
    for rows, bands in released_runs(data, schema, task.sql(), trials, EPSILON):
        released.append(pd.DataFrame(rows, columns=[*task.groups, "sum", "avg"]).set_index(list(task.groups)))
        keyed = [(*row[: len(task.groups)], *band[len(task.groups) :]) for row, band in zip(rows, bands)]
        intervals.append(pd.DataFrame(keyed, columns=[*task.groups, "sum", "avg"]).set_index(list(task.groups)))
    return released, intervals


def coverage(exact: pd.DataFrame, intervals: list[pd.DataFrame], column: str) -> float:
    """The share of 95 % intervals holding the exact value (AVG: groups with rows only; a NULL AVG, no interval,
    counts as not covered)."""
    covered = []
    for frame in intervals:
        frame = frame.reindex(exact.index)
        for key, band in frame[column].items():
            if column == "avg" and exact.loc[key, "count"] == 0:
                continue
            covered.append(isinstance(band, tuple) and band[0] <= exact.loc[key, column] <= band[1])
    return float(np.mean(covered))


def mean_half_width(exact: pd.DataFrame, intervals: list[pd.DataFrame]) -> float:
    """The mean half-width of dpsql's 95 % AVG intervals (groups with rows and an interval): what coverage costs."""
    widths = []
    for frame in intervals:
        for key, band in frame.reindex(exact.index)["avg"].items():
            if exact.loc[key, "count"] > 0 and isinstance(band, tuple):
                widths.append((band[1] - band[0]) / 2)
    return float(np.mean(widths))


def even_split_trials(task: Task, data: pd.DataFrame, trials: int, rng: np.random.Generator) -> list[pd.DataFrame]:
    low, high = task.bounds
    mid, half = (low + high) / 2, (high - low) / 2
    exact = truth(task, data)
    shifted = exact["sum"] - mid * exact["count"]
    released = []
    for _ in range(trials):
        count = exact["count"] + rng.laplace(0, 1 / (EPSILON / 2), len(exact))
        total = shifted + rng.laplace(0, half / (EPSILON / 2), len(exact)) + mid * count
        average = (total / count.where(count > 0)).clip(low, high).fillna(mid)
        released.append(pd.DataFrame({"sum": total, "avg": average}))
    return released


PEERS = {
    "OpenDP": ("DPSQL_PEER_PYTHON", "opendp_aggregates.py"),
    "SmartNoise SQL": ("DPSQL_SNSQL_PYTHON", "snsql_aggregates.py"),
    "Tumult Analytics": ("DPSQL_TUMULT_PYTHON", "tumult_aggregates.py"),
}


def peer_trials(peer: str, task: Task, trials: int, epsilon: float = EPSILON, sum_only: bool = False) -> list[pd.DataFrame] | None:
    """A peer's releases from its own environment, or None with a printed note (``sum_only``: one SUM query)."""
    variable, script_name = PEERS[peer]
    python = os.environ.get(variable)
    if not python:
        print(f"  ({peer} skipped for {task.name}: set {variable})", file=sys.stderr)
        return None
    request = {
        "data": str(DATA / task.file), "groups": list(task.groups), "column": task.column, "bounds": list(task.bounds),
        "epsilon": epsilon, "trials": trials, "categories": task.categories, "sum_only": sum_only,
    }
    script = HERE / "peers" / script_name
    done = subprocess.run([python, str(script)], input=json.dumps(request), capture_output=True, text=True)
    if done.returncode != 0:  # e.g. SmartNoise refuses bounds whose noise scale it finds too large
        print(f"  ({peer} refused {task.name}: {done.stderr.strip().splitlines()[-1][:200]})", file=sys.stderr)
        return None
    print(f"  {task.name}: {done.stderr.strip().splitlines()[-1]}", file=sys.stderr)
    released = []
    for rows in json.loads(done.stdout):
        frame = pd.DataFrame(rows, columns=[*task.groups, "sum", "avg"])
        released.append(frame.set_index(list(task.groups)) if task.groups else frame.set_index(pd.Index([()] * len(frame))))
    return released


def errors(task: Task, exact: pd.DataFrame, released: list[pd.DataFrame]) -> tuple[float, float]:
    """Mean absolute error of SUM and of AVG over groups and trials (a missing AVG reads as the midpoint)."""
    mid = sum(task.bounds) / 2
    sums, averages = [], []
    for frame in released:
        frame = frame.reindex(exact.index)
        sums.append(np.abs(frame["sum"].astype(float).fillna(0.0) - exact["sum"]).to_numpy())
        populated = exact["count"] > 0
        average = frame["avg"].astype(float).fillna(mid)
        averages.append(np.abs(average - exact["avg"])[populated].to_numpy())
    return float(np.mean(np.concatenate(sums))), float(np.mean(np.concatenate(averages)))


CUBE_SETS = (("sex", "married"), ("sex",), ("married",), ())


def cube_rows(trials: int, rng: np.random.Generator) -> list[dict[str, object]]:
    """dpsql's CUBE (sex, married) against the even split per grouping set (module doc)."""
    task = TASKS[1]
    data = task.frame()
    low, high = task.bounds
    mid, half = (low + high) / 2, (high - low) / 2
    clamped = data.assign(v=data[task.column].clip(low, high))
    exact = {}
    for kept in CUBE_SETS:
        grouped = clamped.groupby(list(kept)).v.agg(["sum", "count"]) if kept else pd.DataFrame({"sum": [clamped.v.sum()], "count": [len(clamped)]}, index=[()])
        for key, row in grouped.iterrows():
            values = dict(zip(kept, key if isinstance(key, tuple) else (key,)))
            exact[(values.get("sex"), values.get("married"))] = (row["sum"], row["count"])
    schema = {"privacy_unit": None, "columns": {**{g: {"categories": c} for g, c in task.categories.items()}, task.column: {"bounds": list(task.bounds)}}}
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=EPSILON * trials), reuse=False)
    connection.register("t", data, schema=schema)
    sql = f"SELECT sex, married, SUM({task.column}), AVG({task.column}) FROM t GROUP BY CUBE (sex, married)"
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    share = EPSILON / len(CUBE_SETS) / 2
    for _ in range(trials):
        for sex, married, total, average in connection.cursor().execute(sql, epsilon=EPSILON).fetchall():
            true_sum, true_count = exact[(sex, married)]
            ours.append((abs(total - true_sum), abs((average if average is not None else mid) - true_sum / true_count)))
        for true_sum, true_count in exact.values():
            count = true_count + rng.laplace(0, 1 / share)
            total = true_sum - mid * true_count + rng.laplace(0, half / share) + mid * count
            average = min(max(total / count, low), high) if count > 0 else mid
            theirs.append((abs(total - true_sum), abs(average - true_sum / true_count)))
    connection.close()
    name = "PUMS_10k income by CUBE (sex, married)"
    mae = {method: np.mean(np.array(errors_), axis=0) for method, errors_ in (("dpsql", ours), ("even split per grouping set", theirs))}
    return [
        {"task": name, "method": method, "groups": len(exact), "trials": trials, "epsilon": EPSILON,
         "sum_mae": float(sum_mae), "avg_mae": float(avg_mae), "avg_mae_vs_dpsql": float(avg_mae / mae["dpsql"][1]),
         "sum_coverage_95": "", "avg_coverage_95": ""}
        for method, (sum_mae, avg_mae) in mae.items()
    ]


CUBE_SUM = Task("PUMS_10k SUM(income) by CUBE (educ, sex)", "PUMS_10k.csv", ("educ", "sex"), "income", (0, 500_000),
                {"educ": list(range(1, 17)), "sex": [0, 1]})
CUBE_SUM_SETS = (("educ", "sex"), ("educ",), ("sex",), ())


def _set_of(row: tuple[object, ...]) -> tuple[str, ...]:
    """The grouping set of a CUBE row (a rolled-up column is NULL; the declared categories hold no NULL)."""
    return tuple(g for g, value in zip(CUBE_SUM.groups, row) if value is not None)


def cube_sum_rows(trials: int, peer_trial_counts: dict[str, int]) -> list[dict[str, object]]:
    """``SUM(income) … GROUP BY CUBE (educ, sex)`` at ε = 1 as one dpsql statement, against each peer answering
    every grouping set as its own SUM query at ε/4: the MAE per grouping set and over all 51 cells, and the
    coverage of dpsql's 95 % intervals."""
    task = CUBE_SUM
    data = task.frame()
    clamped = data.assign(v=data[task.column].clip(*task.bounds))
    exact: dict[tuple[object, ...], float] = {}
    for kept in CUBE_SUM_SETS:
        grouped = clamped.groupby(list(kept)).v.sum() if kept else pd.Series({(): clamped.v.sum()})
        for key, total in grouped.items():
            values = dict(zip(kept, key if isinstance(key, tuple) else (key,)))
            exact[tuple(values.get(g) for g in task.groups)] = float(total)
    for kept in CUBE_SUM_SETS:  # declared cells without rows
        for key in itertools.product(*(task.categories[g] for g in kept)):
            exact.setdefault(tuple(dict(zip(kept, key)).get(g) for g in task.groups), 0.0)
    schema = {"privacy_unit": None, "columns": {**{g: {"categories": c} for g, c in task.categories.items()}, task.column: {"bounds": list(task.bounds)}}}
    sql = f"SELECT educ, sex, SUM({task.column}) FROM t GROUP BY CUBE (educ, sex)"
    errors_by: dict[str, dict[tuple[str, ...], list[float]]] = {"dpsql": {s: [] for s in CUBE_SUM_SETS}}
    covered = []
    for rows, bands in released_runs(data, schema, sql, trials, EPSILON):
        for (educ, sex, total), (_, _, band) in zip(rows, bands):
            truth = exact[(educ, sex)]
            errors_by["dpsql"][_set_of((educ, sex))].append(abs(total - truth))
            covered.append(band[0] <= truth <= band[1])
    for peer in PEERS:
        found: dict[tuple[str, ...], list[float]] = {}
        for kept in CUBE_SUM_SETS:
            subset = Task(task.name, task.file, kept, task.column, task.bounds, {g: task.categories[g] for g in kept})
            released = peer_trials(peer, subset, peer_trial_counts[peer], EPSILON / len(CUBE_SUM_SETS), sum_only=True)
            if released is None:
                break
            found[kept] = [abs(float(total) - exact[tuple(dict(zip(kept, key if isinstance(key, tuple) else (key,))).get(g) for g in task.groups)])
                           for frame in released for key, total in frame["sum"].items()]
        else:
            errors_by[peer] = found
    rows_out = []
    ours = {s: float(np.mean(e)) for s, e in errors_by["dpsql"].items()}
    ours_all = float(np.mean(np.concatenate([e for e in errors_by["dpsql"].values()])))
    for method, by_set in errors_by.items():
        for kept in (*CUBE_SUM_SETS, None):
            values = np.concatenate(list(by_set.values())) if kept is None else np.array(by_set[kept])
            mae = float(np.mean(values))
            reference = ours_all if kept is None else ours[kept]
            rows_out.append({
                "task": f"{task.name}: {'all 51 cells' if kept is None else '(' + ', '.join(kept) + ')'}",
                "method": method if method == "dpsql" else f"{method}, each set at ε/4", "groups": 51 if kept is None else len(by_set[kept]) // (trials if method == "dpsql" else peer_trial_counts[method]),
                "trials": trials if method == "dpsql" else peer_trial_counts[method], "epsilon": EPSILON, "sum_mae": mae, "avg_mae": "",
                "avg_mae_vs_dpsql": "", "sum_mae_vs_dpsql": mae / reference,
                "sum_coverage_95": float(np.mean(covered)) if method == "dpsql" and kept is None else "", "avg_coverage_95": "",
            })
    return rows_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--tumult-trials", type=int, default=10, help="Tumult's trials (each Spark query takes seconds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", nargs="*", default=[""], help="only the tasks whose names contain one of these words")
    parser.add_argument("--csv", default="aggregates.csv")
    args = parser.parse_args()
    peer_trial_counts = {peer: args.trials for peer in PEERS} | {"Tumult Analytics": args.tumult_trials}
    rng = np.random.default_rng(args.seed)
    rows = []
    for task in (t for t in (*TASKS, *CLIP_TASKS) if any(word in t.name for word in args.tasks)):
        data = task.frame()
        exact = truth(task, data)
        dpsql_released, dpsql_intervals = dpsql_trials(task, data, args.trials)
        methods = {"dpsql": dpsql_released}
        if task.declared is None:  # ``bounds: auto`` gives the others no bounds to work with
            methods["even split"] = even_split_trials(task, data, args.trials, rng)
        for peer in PEERS if task.declared is None else ():
            released = peer_trials(peer, task, peer_trial_counts[peer])
            if released is not None:
                methods[peer] = released
        measured = {name: errors(task, exact, released) for name, released in methods.items()}
        for name, (sum_mae, avg_mae) in measured.items():
            rows.append({
                "task": task.name, "method": name, "groups": len(exact), "trials": len(methods[name]), "epsilon": EPSILON,
                "sum_mae": sum_mae, "avg_mae": avg_mae, "avg_mae_vs_dpsql": avg_mae / measured["dpsql"][1],
                "sum_coverage_95": coverage(exact, dpsql_intervals, "sum") if name == "dpsql" else "",
                "avg_coverage_95": coverage(exact, dpsql_intervals, "avg") if name == "dpsql" else "",
                "avg_half_width_95": mean_half_width(exact, dpsql_intervals) if name == "dpsql" else "",
            })
    if any(word in "PUMS_10k income by CUBE (sex, married)" for word in args.tasks):
        rows += cube_rows(args.trials, rng)
    if any(word in CUBE_SUM.name for word in args.tasks):
        rows += cube_sum_rows(args.trials, peer_trial_counts)
    for row in rows:
        row.setdefault("sum_mae_vs_dpsql", "")
        row.setdefault("avg_half_width_95", "")
    columns = ["task", "method", "groups", "trials", "epsilon", "sum_mae", "avg_mae", "avg_mae_vs_dpsql", "sum_mae_vs_dpsql",
               "sum_coverage_95", "avg_coverage_95", "avg_half_width_95"]
    print_table(rows, columns, number_text)
    print(f"written to {write_csv(args.csv, rows, columns)}")
    print_clip_summary(rows)


def print_clip_summary(rows: list[dict[str, object]]) -> None:
    """clip: auto against the well-chosen bounds (dpsql) and against the peers given the same loose bounds."""
    mae = {(r["task"], r["method"]): float(r["avg_mae"]) for r in rows if r["avg_mae"] != ""}  # type: ignore[arg-type]
    for chosen, loose in ((CLIP_TASKS[0], CLIP_TASKS[1]), (CLIP_TASKS[2], CLIP_TASKS[3]), (CLIP_TASKS[0], CLIP_TASKS[4]), (CLIP_TASKS[0], CLIP_TASKS[5]),
                          (CLIP_TASKS[2], CLIP_TASKS[6]), (CLIP_TASKS[2], CLIP_TASKS[7])):
        ours = mae.get((loose.name, "dpsql"))
        if ours is None:
            continue
        line = f"{loose.name}: AVG MAE {ours:.4g}"
        if (chosen.name, "dpsql") in mae:
            line += f" = {ours / mae[(chosen.name, 'dpsql')]:.2f}× dpsql's with {list(chosen.bounds)}"
        for peer in PEERS:
            if (loose.name, peer) in mae:
                line += f"; {mae[(loose.name, peer)] / ours:.1f}× lower than {peer} with {list(loose.bounds)}"
        coverage_95 = next((r["avg_coverage_95"] for r in rows if r["task"] == loose.name and r["method"] == "dpsql"), "")
        if coverage_95 != "":
            line += f"; 95 % AVG intervals cover {100 * float(coverage_95):.1f} % of the unclipped means"  # type: ignore[arg-type]
        print(line)


if __name__ == "__main__":
    main()
