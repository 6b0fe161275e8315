"""Composed statements: the planner's budget shares against an equal split, in expected total squared error.

A statement measuring different data — ``COUNT(DISTINCT pid)`` beside ``COUNT(*)``, two aggregated columns —
is planned as parts at the shares ``planner.composition_shares`` chooses. On a generated table (``--rows``
rows, 3 per unit) this prints, per statement, the shares EXPLAIN shows and the expected total squared error of
its parts (each part's EXPLAIN at its share, in count units: a moment block's errors divided by its scale²)
beside the same parts at an equal split. Expected errors are the planner's exact ones (no sampling).

    python benchmarks/composition.py [--rows 3000]

Prints a table and writes benchmarks/results/composition.csv.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from results_io import print_table, write_csv

import dpsql

STATEMENTS = [
    ("SELECT COUNT(DISTINCT pid), COUNT(*) FROM t", ["SELECT COUNT(DISTINCT pid) FROM t", "SELECT COUNT(*) FROM t"]),
    ("SELECT sex, COUNT(DISTINCT pid), COUNT(*) FROM t GROUP BY sex",
     ["SELECT sex, COUNT(DISTINCT pid) FROM t GROUP BY sex", "SELECT sex, COUNT(*) FROM t GROUP BY sex"]),
    ("SELECT SUM(age), AVG(income) FROM t", ["SELECT SUM(age) FROM t", "SELECT AVG(income) FROM t"]),
    ("SELECT sex, AVG(age), SUM(income) FROM t GROUP BY sex", ["SELECT sex, AVG(age) FROM t GROUP BY sex", "SELECT sex, SUM(income) FROM t GROUP BY sex"]),
]


def _total(cursor: dpsql.Cursor, sql: str, epsilon: float) -> float:
    """The expected total squared error of a statement's plan, in count units."""
    rows = cursor.execute("EXPLAIN " + sql, epsilon=epsilon).fetchall()
    scale = next((r[2] for r in rows if r[0] == "aggregate"), 1.0)
    return sum(r[2] for r in rows if r[0] == "error" and r[1] == "expected total squared error") / scale**2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=3000)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"pid": np.arange(args.rows) % (args.rows // 3 + 1), "age": rng.integers(0, 100, args.rows),
                          "income": rng.integers(0, 100000, args.rows), "sex": rng.choice(["M", "F"], args.rows)})
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    schema = {"privacy_unit": "pid", "max_rows_per_unit": 3,
              "columns": {"age": {"bounds": [0, 100]}, "income": {"bounds": [0, 100000]}, "sex": {"categories": ["F", "M"]}}}
    connection.register("t", frame, schema=schema)
    cursor = connection.cursor()
    found = []
    for composed, parts in STATEMENTS:
        rows = cursor.execute("EXPLAIN " + composed, epsilon=1.0).fetchall()
        shares = [r[2] for r in rows if r[0] == "composition" and r[1].startswith("part ")]
        planned = sum(_total(cursor, p, s) for p, s in zip(parts, shares))
        equal = sum(_total(cursor, p, 1 / len(parts)) for p in parts)
        found.append({"statement": composed, "shares": " / ".join(f"{s:.3f}" for s in shares), "planned": f"{planned:.4g}",
                      "equal split": f"{equal:.4g}", "ratio": f"{equal / planned:.2f}"})
    columns = ["statement", "shares", "planned", "equal split", "ratio"]
    print_table(found, columns)
    write_csv("composition.csv", found, columns)


if __name__ == "__main__":
    main()
