"""GROUP BY a column with no public domain: dpsql's one-statement designs against OpenDP, side by side.

PUMS_10k (10,000 persons, one row each: ``PersonID`` is the privacy unit), 233 PUMAs with no public
domain, ``sex`` public (0/1): 466 (puma, sex) cells, total budget (ε, δ) = (1, 1e-5), TRIALS interleaved
trials. For every configuration the table shows the mean absolute error of the released cells, of all
466 cells (a cell not released reads 0), of the 233 PUMA totals, of the two ``(sex)`` totals and of the
grand total, how many cells were released, and how often dpsql's 95 % intervals (``confidence_interval``)
hold the exact count, for the released cells and for the released PUMA totals. Configurations:

* OpenDP (its Polars context, in a separate environment): one ``group_by(puma, sex).agg(len())`` — noisy
  counts, thresholded; PUMA, sex and grand totals summed by the user from the released cells.
* dpsql, one ``GROUP BY CUBE (puma, sex)`` at ε = 1: keys selected from the statement's own measured
  counts, the (sex) and () totals measured on the whole table, all consistent (``dpsql.selection``).
* dpsql, one ``GROUP BY puma, sex`` at ε = 1 (totals summed from the released cells, as OpenDP's).
* dpsql, ``GROUP BY puma`` at 0.5 then ``CUBE (puma, sex)`` at 0.5 (the two-step route).
* dpsql per query: the CUBE's four grouping sets as four statements at ε/4 each (``reuse=False``).
* dpsql, the CUBE's four grouping sets as one batch (``conn.workload``) at ε = 1 with the (puma, sex)
  statement weighted ×30: how far the finest cells can go toward one query's noise floor (a discrete
  Laplace count at ε = 1 has mean absolute error 0.85) while the totals stay measured on the whole table.

A second table: **two columns without declared domain**, ``GROUP BY puma, educ`` with both undeclared (233 ×
16 = 3,728 possible pairs, those present in the data are the cells), at the same (ε, δ): OpenDP's one
``group_by(puma, educ)`` against dpsql's one statement, which selects in stages (``planner.staged_selection``:
each column's keys from its noisy totals at a tenth of ε, then PUMAs over the released education levels), and
with the grand total in the same statement (``GROUPING SETS ((puma, educ), ())``: the total measured on the whole
table at a share of the second stage the planner chooses); and the two-statement route (``GROUP BY educ`` first)
the staged design does inside one statement.

A third table: **SUM(income) grouped by the two undeclared columns**, ``SELECT puma, educ, SUM(income) … GROUP BY
puma, educ`` with ``income`` bounded to [0, 500000], in one statement at the same (ε, δ): the stages select the key
tuples at the planner's share of ε and the sums are measured over every released tuple with the rest
(``planner.split_staged_selection``); the mean absolute error of the released cells' sums and of all present pairs'
sums (a pair not released reads 0), and the coverage of the sums' 95 % intervals; beside it, the two-statement route
(the pairs' counts first, at half of ε, then the sums over the released pairs). OpenDP's comparable query is one
``group_by(puma, educ).agg(dp.len(), income.dp.sum((0, 500000)))`` (its count selects the keys).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/unknown_keys.py [--trials 20] [--only sums]
    # OpenDP: python3 -m venv /tmp/peers && /tmp/peers/bin/pip install "opendp[polars]" pandas
    #         DPSQL_PEER_PYTHON=/tmp/peers/bin/python .venv/bin/python benchmarks/unknown_keys.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

import dpsql
from results_io import number_text, print_table, write_csv

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("DPSQL_BENCH_DATA", HERE.parent.parent / "shared" / "data")) / "PUMS_10k.csv"  # the repository sits beside shared/
EPSILON, DELTA = 1.0, 1e-5
SCHEMA = {"privacy_unit": "PersonID", "max_rows_per_unit": 1, "columns": {"sex": {"categories": [0, 1]}, "puma": "unknown"}}
CUBE = "SELECT puma, sex, GROUPING(puma, sex) AS g, COUNT(*) FROM pums GROUP BY CUBE (puma, sex)"
CELLS = "SELECT puma, sex, COUNT(*) FROM pums GROUP BY puma, sex"
CELL_WEIGHT = 30.0

Released = dict[str, object]  # cells {(puma, sex): n}, the totals each configuration gives, dpsql's intervals
Rows = list[tuple]  # released rows, each followed by its 95 % interval of the count (the last column)


def with_intervals(result: object) -> Rows:
    """A result's rows, each with the 95 % interval of its count (its last column) appended."""
    return [(*row, interval[-1]) for row, interval in zip(result.fetchall(), result.confidence_interval(0.95))]  # type: ignore[attr-defined]


def run_statements(frame: pd.DataFrame, statements: list[tuple[str, float]], reuse: bool = True) -> list[Rows]:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=EPSILON, delta=DELTA), reuse=reuse)
    connection.register("pums", frame, schema=SCHEMA)
    rows = [with_intervals(connection.cursor().execute(sql, epsilon=epsilon)) for sql, epsilon in statements]
    connection.close()
    return rows


def from_cells(cells: dict[tuple[int, int], float], intervals: dict[tuple[int, int], tuple[float, float]] | None = None) -> Released:
    """Totals summed from released cells (what a user of OpenDP or of a plain GROUP BY does)."""
    puma: dict[int, float] = {}
    sex: dict[int, float] = {}
    for (p, s), n in cells.items():
        puma[p] = puma.get(p, 0.0) + n
        sex[s] = sex.get(s, 0.0) + n
    return {"cells": cells, "puma": puma, "sex": sex, "total": sum(cells.values()), "cell_intervals": intervals or {}, "puma_intervals": {}}


def from_cube(rows: Rows) -> Released:
    return {
        "cells": {(p, s): n for p, s, g, n, _ in rows if g == 0},
        "puma": {p: n for p, s, g, n, _ in rows if g == 1},
        "sex": {s: n for p, s, g, n, _ in rows if g == 2},
        "total": next(n for p, s, g, n, _ in rows if g == 3),
        "cell_intervals": {(p, s): i for p, s, g, _, i in rows if g == 0},
        "puma_intervals": {p: i for p, s, g, _, i in rows if g == 1},
    }


def cube_once(frame: pd.DataFrame) -> Released:
    return from_cube(run_statements(frame, [(CUBE, EPSILON)])[0])


def cells_once(frame: pd.DataFrame) -> Released:
    rows = run_statements(frame, [(CELLS, EPSILON)])[0]
    return from_cells({(p, s): n for p, s, n, _ in rows}, {(p, s): i for p, s, _, i in rows})


def two_steps(frame: pd.DataFrame) -> Released:
    return from_cube(run_statements(frame, [("SELECT puma, COUNT(*) FROM pums GROUP BY puma", 0.5), (CUBE, 0.5)])[-1])


def weighted_batch(frame: pd.DataFrame) -> Released:
    """The CUBE's grouping sets as one weighted batch: the cells' statement weighted ×CELL_WEIGHT."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=EPSILON, delta=DELTA))
    connection.register("pums", frame, schema=SCHEMA)
    statements = [CELLS, "SELECT puma, COUNT(*) FROM pums GROUP BY puma", "SELECT sex, COUNT(*) FROM pums GROUP BY sex", "SELECT COUNT(*) FROM pums"]
    cells, puma, sex, total = (with_intervals(r) for r in connection.workload(statements, epsilon=EPSILON, weights=[CELL_WEIGHT, 1, 1, 1]))
    connection.close()
    return by_statement(cells, puma, sex, total)


def by_statement(cells: Rows, puma: Rows, sex: Rows, total: Rows) -> Released:
    """What the four grouping sets asked as four statements released."""
    return {
        "cells": {(p, s): float(n) for p, s, n, _ in cells},
        "puma": {p: float(n) for p, n, _ in puma},
        "sex": {s: float(n) for s, n, _ in sex},
        "total": float(total[0][0]),
        "cell_intervals": {(p, s): i for p, s, _, i in cells},
        "puma_intervals": {p: i for p, _, i in puma},
    }


def per_query(frame: pd.DataFrame) -> Released:
    quarter = EPSILON / 4
    return by_statement(*run_statements(
        frame,
        [(CELLS, quarter), ("SELECT puma, COUNT(*) FROM pums GROUP BY puma", quarter), ("SELECT sex, COUNT(*) FROM pums GROUP BY sex", quarter),
         ("SELECT COUNT(*) FROM pums", quarter)],
        reuse=False,
    ))


def opendp_trials(trials: int, columns: str = "puma,sex", summed: tuple[str, float, float] | None = None) -> tuple[list[Released], str] | None:
    """OpenDP's releases from the peer environment (DPSQL_PEER_PYTHON), or None with a printed note: the cells' counts,
    or — with ``summed`` (column, low, high) — their sums of that column."""
    python = os.environ.get("DPSQL_PEER_PYTHON")
    if not python:
        print("note: OpenDP skipped (set DPSQL_PEER_PYTHON to a Python with opendp[polars]; see the module doc)")
        return None
    value = [] if summed is None else [summed[0], str(summed[1]), str(summed[2])]
    output = subprocess.run(
        [python, str(HERE / "peers" / "opendp_keys.py"), str(DATA), str(EPSILON), str(DELTA), str(trials), columns, *value],
        check=True, capture_output=True, text=True,
    ).stdout.strip().splitlines()
    releases = [from_cells({(row[0], row[1]): float(row[-1]) for row in json.loads(line)}) for line in output[:-1]]
    return releases, json.loads(output[-1])["opendp"]


def errors(release: Released, exact: Released) -> dict[str, float]:
    cells, truth = release["cells"], exact["cells"]
    assert isinstance(cells, dict) and isinstance(truth, dict)
    released = [abs(n - truth.get(k, 0.0)) for k, n in cells.items()]
    return {
        "mae_released_cells": float(np.mean(released)) if released else float("nan"),
        "mae_all_cells": float(np.mean([abs(cells.get(k, 0.0) - n) for k, n in truth.items()])),
        "mae_puma_totals": float(np.mean([abs(release["puma"].get(p, 0.0) - n) for p, n in exact["puma"].items()])),  # type: ignore[union-attr]
        "mae_sex_totals": float(np.mean([abs(release["sex"].get(s, 0.0) - n) for s, n in exact["sex"].items()])),  # type: ignore[union-attr]
        "error_grand_total": abs(float(release["total"]) - float(exact["total"])),  # type: ignore[arg-type]
        "cells_released": float(len(cells)),
        "coverage_cells_95": coverage(release["cell_intervals"], truth),  # type: ignore[arg-type]
        "coverage_puma_95": coverage(release["puma_intervals"], exact["puma"]),  # type: ignore[arg-type]
    }


def coverage(intervals: dict[object, tuple[float, float]], truth: dict[object, float]) -> float:
    """The share of released intervals that hold the exact count (NaN without intervals: a peer)."""
    if not intervals:
        return float("nan")
    return float(np.mean([low <= truth.get(k, 0.0) <= high for k, (low, high) in intervals.items()]))


def main(trials: int) -> list[dict[str, object]]:
    frame = pd.read_csv(DATA)[["PersonID", "puma", "sex"]]
    exact = from_cells({k: float(v) for k, v in frame.groupby(["puma", "sex"]).size().items()})
    configurations: dict[str, Callable[[pd.DataFrame], Released]] = {
        "dpsql: one CUBE (puma, sex) at 1": cube_once,
        "dpsql: one GROUP BY puma, sex at 1": cells_once,
        "dpsql: GROUP BY puma at 0.5, then CUBE at 0.5": two_steps,
        "dpsql: 4 grouping sets as 4 statements at 0.25": per_query,
        "dpsql: the 4 grouping sets as one batch, cells weighted x30": weighted_batch,
    }
    measured: dict[str, list[dict[str, float]]] = {name: [] for name in configurations}
    for _ in range(trials):  # interleaved: every configuration sees the same machine state
        for name, run in configurations.items():
            measured[name].append(errors(run(frame), exact))
    peer = opendp_trials(trials)
    if peer is not None:
        releases, version = peer
        measured[f"OpenDP {version}: one group_by(puma, sex)"] = [errors(r, exact) for r in releases]
    table = []
    for name, runs in measured.items():
        row: dict[str, object] = {"configuration": name}
        row.update({metric: round(float(np.mean([r[metric] for r in runs])), 3) for metric in runs[0]})
        table.append(row)
    return table


JOINT_SCHEMA = {"privacy_unit": "PersonID", "max_rows_per_unit": 1, "columns": {"puma": "unknown", "educ": "unknown"}}
JOINT = "SELECT puma, educ, COUNT(*) FROM pums GROUP BY puma, educ"
EDUC_EPSILON = 0.1  # the two-step route: educ's keys first (16 values, large counts), then the pairs over them
JOINT_TOTAL = "SELECT puma, educ, COUNT(*) FROM pums GROUP BY GROUPING SETS ((puma, educ), ())"
Joint = tuple[dict[tuple[int, int], float], dict[tuple[int, int], tuple[float, float]], float | None]  # cells, intervals, total


def joint_run(frame: pd.DataFrame, statements: list[tuple[str, float]], schema: dict[str, object] = JOINT_SCHEMA) -> Joint:
    """The statements in turn on one connection, their ε adding up to EPSILON and their selections' δ to DELTA; the
    last one's release."""
    selection_delta = DELTA / len(statements)
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=EPSILON, delta=DELTA), selection_delta=selection_delta)
    connection.register("pums", frame, schema=schema)
    for sql, epsilon in statements:
        rows = with_intervals(connection.cursor().execute(sql, epsilon=epsilon))
    connection.close()
    cells = {(p, e): float(n) for p, e, n, _ in rows if p is not None}
    total = next((float(n) for p, _, n, _ in rows if p is None), None)
    return cells, {(p, e): i for p, e, _, i in rows if p is not None}, total


def joint_errors(release: Joint, exact: dict[tuple[int, int], float]) -> dict[str, float]:
    cells, intervals, total = release
    released = [abs(n - exact.get(k, 0.0)) for k, n in cells.items()]
    return {
        "cells_released": float(len(cells)),
        "mae_released_cells": float(np.mean(released)) if released else float("nan"),
        "mae_all_cells": float(np.mean([abs(cells.get(k, 0.0) - n) for k, n in exact.items()])),
        "error_grand_total": abs((sum(cells.values()) if total is None else total) - sum(exact.values())),
        "coverage_cells_95": coverage(intervals, exact),  # type: ignore[arg-type]
    }


def joint_main(trials: int) -> list[dict[str, object]]:
    """The second table (module doc): GROUP BY puma, educ with both columns undeclared."""
    frame = pd.read_csv(DATA)[["PersonID", "puma", "educ"]]
    exact = {k: float(v) for k, v in frame.groupby(["puma", "educ"]).size().items()}
    educ_first = [("SELECT educ, COUNT(*) FROM pums GROUP BY educ", EDUC_EPSILON)]
    configurations = {
        "dpsql: one GROUP BY puma, educ at 1 (selected in stages)": [(JOINT, EPSILON)],
        "dpsql: one GROUPING SETS ((puma, educ), ()) at 1 (in stages)": [(JOINT_TOTAL, EPSILON)],
        f"dpsql: GROUP BY educ at {EDUC_EPSILON:g}, then GROUP BY puma, educ at {EPSILON - EDUC_EPSILON:g}": [*educ_first, (JOINT, EPSILON - EDUC_EPSILON)],
        f"dpsql: GROUP BY educ at {EDUC_EPSILON:g}, then GROUPING SETS ((puma, educ), ()) at {EPSILON - EDUC_EPSILON:g}": [
            *educ_first, (JOINT_TOTAL, EPSILON - EDUC_EPSILON)
        ],
    }
    measured: dict[str, list[dict[str, float]]] = {name: [] for name in configurations}
    for _ in range(trials):
        for name, statements in configurations.items():
            measured[name].append(joint_errors(joint_run(frame, statements), exact))
    peer = opendp_trials(trials, "puma,educ")
    if peer is not None:
        releases, version = peer
        measured[f"OpenDP {version}: one group_by(puma, educ)"] = [joint_errors((r["cells"], {}, None), exact) for r in releases]  # type: ignore[arg-type]
    return [{"configuration": name, **{m: round(float(np.mean([r[m] for r in runs])), 3) for m in runs[0]}} for name, runs in measured.items()]


SUMMED = ("income", 0.0, 500000.0)
SUM_SCHEMA = {**JOINT_SCHEMA, "columns": {**JOINT_SCHEMA["columns"], "income": {"bounds": [SUMMED[1], SUMMED[2]]}}}  # type: ignore[dict-item]
JOINT_SUM = "SELECT puma, educ, SUM(income) FROM pums GROUP BY puma, educ"


def sum_main(trials: int) -> list[dict[str, object]]:
    """The third table (module doc): SUM(income) grouped by puma and educ, both undeclared, in one statement."""
    frame = pd.read_csv(DATA)[["PersonID", "puma", "educ", "income"]]
    exact = {k: float(v) for k, v in frame.groupby(["puma", "educ"]).income.sum().items()}
    half = EPSILON / 2
    configurations = {
        "dpsql: one SELECT puma, educ, SUM(income) … GROUP BY puma, educ at 1 (selected in stages)": [(JOINT_SUM, EPSILON)],
        f"dpsql: GROUP BY puma, educ (COUNT) at {half:g}, then SUM over its released keys at {half:g}": [(JOINT, half), (JOINT_SUM, half)],
    }
    measured: dict[str, list[dict[str, float]]] = {name: [] for name in configurations}
    for _ in range(trials):
        for name, statements in configurations.items():
            measured[name].append(joint_errors(joint_run(frame, statements, SUM_SCHEMA), exact))
    peer = opendp_trials(trials, "puma,educ", SUMMED)
    if peer is not None:
        releases, version = peer
        measured[f"OpenDP {version}: one group_by(puma, educ).agg(len, sum)"] = [joint_errors((r["cells"], {}, None), exact) for r in releases]  # type: ignore[arg-type]
    return [{"configuration": name, **{m: round(_mean_of_defined([r[m] for r in runs]), 3) for m in runs[0]}} for name, runs in measured.items()]


def _mean_of_defined(values: list[float]) -> float:
    """The mean over the trials where a figure is defined (the released cells' error: where a cell was released —
    OpenDP's often release none), NaN where it never is."""
    defined = [v for v in values if not np.isnan(v)]
    return float(np.mean(defined)) if defined else float("nan")


def report(table: list[dict[str, object]], joint: list[dict[str, object]], sums: list[dict[str, object]]) -> None:
    print(f"PUMS_10k, 466 (puma, sex) cells, (ε, δ) = ({EPSILON:g}, {DELTA:g}); means over trials")
    print_table(table, list(table[0]), number_text)
    write_csv("unknown_keys.csv", table)
    print(f"\nPUMS_10k, GROUP BY puma, educ with both undeclared ({len(pd.read_csv(DATA).groupby(['puma', 'educ']))} pairs present), "
          f"(ε, δ) = ({EPSILON:g}, {DELTA:g}); means over trials")
    print_table(joint, list(joint[0]), number_text)
    write_csv("unknown_keys_joint.csv", joint)
    print(f"\nPUMS_10k, SUM(income) in [0, 500000] GROUP BY puma, educ with both undeclared, (ε, δ) = ({EPSILON:g}, {DELTA:g}); "
          "errors in dollars, means over trials")
    print_table(sums, list(sums[0]), number_text)
    write_csv("unknown_keys_sums.csv", sums)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--only", choices=("sums",), help="run only the sums' table")
    arguments = parser.parse_args()
    if arguments.only == "sums":
        sums = sum_main(arguments.trials)
        print_table(sums, list(sums[0]), number_text)
        write_csv("unknown_keys_sums.csv", sums)
    else:
        report(main(arguments.trials), joint_main(arguments.trials), sum_main(arguments.trials))
