"""SmartNoise SQL's answer to ``SELECT g, SUM(v), AVG(v) FROM t GROUP BY g`` (run by ``benchmarks/aggregates.py``).

Runs in a separate environment that has smartnoise-sql (never a dpsql dependency). Reads a JSON request
on stdin (data path, group columns, value column, bounds, total ε, trials) and prints a JSON list, one
entry per trial, of ``[*group values, sum, avg]`` rows; its version goes to stderr. SmartNoise's ε is per
computed column, so the per-column ε is the total divided by what ``get_privacy_cost`` reports at ε = 1
(its SUM and COUNT mechanisms; AVG is derived from them). Every group is released (``censor_dims``
off: the groups are public here, as in dpsql's schema), one row per unit (``row_privacy``), values
clamped to the bounds.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

import snsql
from snsql import Privacy
from shared_table import read_table  # beside this script: on sys.path when it runs


def main() -> None:
    request = json.load(sys.stdin)
    groups, column = request["groups"], request["column"]
    low, high = request["bounds"]
    data = read_table(request["data"], [*groups, column])
    table = {"row_privacy": True, "censor_dims": False, "rows": len(data)}
    table.update({g: {"type": "int"} for g in groups})
    table[column] = {"type": "int", "lower": low, "upper": high}
    metadata = {"": {"bench": {"t": table}}}
    keys = ", ".join(groups)
    sum_only = request.get("sum_only", False)  # one SUM query (a grouping set of a CUBE answered on its own)
    items = f"SUM({column}) AS s" if sum_only else f"SUM({column}) AS s, AVG({column}) AS a"
    query = f"SELECT {keys + ', ' if keys else ''}{items} FROM bench.t" + (f" GROUP BY {keys}" if keys else "")
    unit = snsql.from_df(data, privacy=Privacy(epsilon=1.0, delta=1e-6), metadata=metadata)
    cost, _ = unit.get_privacy_cost(query)
    reader = snsql.from_df(data, privacy=Privacy(epsilon=request["epsilon"] / cost, delta=1e-6), metadata=metadata)
    trials = []
    for _ in range(request["trials"]):
        released = reader.execute_df(query)
        trials.append([[*(int(row[g]) for g in groups), float(row["s"]), None if sum_only else float(row["a"])] for _, row in released.iterrows()])
    print(json.dumps(trials))
    print(f"smartnoise-sql {version('smartnoise-sql')}, per-column epsilon {request['epsilon'] / cost:g} (cost at 1: {cost:g})", file=sys.stderr)


if __name__ == "__main__":
    main()
