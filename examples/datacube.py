"""A private data cube: ``GROUP BY CUBE`` over four columns of Adult-like generated data, in one statement.

dpsql plans the 16 grouping sets as one workload, measures them with one aggregation and one charge
(ε = 1), and returns every subtotal consistent with its cells, each with its standard error. The plot
compares, per grouping set, the error dpsql predicts (its standard errors), the error it actually made
(against the exact counts of the generated table), and the error of the usual per-query approach
(each grouping set measured on its own with Laplace noise at ε/16: RMSE √2·16/ε for every cell).

Run: ``python examples/datacube.py [plot.png]`` (default ``datacube.png`` here; needs the ``examples`` extra).
"""

from __future__ import annotations

import itertools
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import dpsql  # noqa: E402

COLUMNS = {"education": 16, "workclass": 9, "race": 5, "sex": 2}
EPSILON, PEOPLE, SEED = 1.0, 30_000, 2026


def generate(people: int, seed: int) -> pd.DataFrame:
    """Skewed, correlated categorical columns shaped like Adult's (one row per person)."""
    rng = np.random.default_rng(seed)
    education = np.minimum(rng.poisson(9, people), 15)
    workclass = (rng.zipf(1.8, people) - 1 + (education > 12)) % 9
    race = rng.choice(5, people, p=[0.85, 0.09, 0.03, 0.02, 0.01])
    sex = (rng.random(people) < 0.33 + 0.02 * (education > 12)).astype(int)
    return pd.DataFrame({"education": education, "workclass": workclass, "race": race, "sex": sex})


def main(plot_path: str) -> None:
    frame = generate(PEOPLE, SEED)
    schema = {"columns": {name: {"range": [0, size - 1]} for name, size in COLUMNS.items()}}
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=EPSILON))
    connection.register("people", frame, schema=schema)
    names = ", ".join(COLUMNS)
    sql = f"SELECT {names}, GROUPING({names}) AS rolled_up, COUNT(*) AS n FROM people GROUP BY CUBE ({names})"
    cursor = connection.cursor()
    for row in cursor.execute("EXPLAIN " + sql, epsilon=EPSILON).fetchall():
        if row[0] in ("cost", "strategy", "error"):
            print(*row)
    cursor.execute(sql, epsilon=EPSILON)
    rows, errors = cursor.fetchall(), cursor.errors
    print(f"released {len(rows)} cells; budget left {connection.budget_remaining():.3g}")

    labels, predicted, empirical = [], [], []
    position = {c: i for i, c in enumerate(COLUMNS)}
    grouping_sets = [s for size in range(len(COLUMNS), -1, -1) for s in itertools.combinations(COLUMNS, size)]
    for kept in grouping_sets:
        mask = sum(1 << (len(COLUMNS) - 1 - i) for i, c in enumerate(COLUMNS) if c not in kept)
        chosen = [(r, e) for r, e in zip(rows, errors) if r[len(COLUMNS)] == mask]
        exact = {(k if isinstance(k, tuple) else (k,)): v for k, v in frame.groupby(list(kept)).size().items()} if kept else {(): len(frame)}
        truth = np.array([exact.get(tuple(r[position[c]] for c in kept), 0) for r, _ in chosen])
        released = np.array([r[-1] for r, _ in chosen])
        labels.append("(" + ", ".join(c[:3] for c in kept) + ")")
        predicted.append(math.sqrt(np.mean([e[-1] ** 2 for _, e in chosen])))
        empirical.append(math.sqrt(np.mean((released - truth) ** 2)))
    baseline = math.sqrt(2) * len(grouping_sets) / EPSILON
    print(f"per-query baseline RMSE per cell: {baseline:.1f}; dpsql predicted {min(predicted):.1f}–{max(predicted):.1f}")

    figure, axes = plt.subplots(figsize=(11, 4.5))
    positions = np.arange(len(labels))
    axes.bar(positions - 0.2, predicted, 0.4, label="dpsql: predicted RMSE per cell")
    axes.bar(positions + 0.2, empirical, 0.4, label="dpsql: actual RMSE per cell (one release)")
    axes.axhline(baseline, color="black", linestyle="--", label=f"per-query Laplace at ε/{len(grouping_sets)}")
    axes.set_xticks(positions, labels, rotation=60, ha="right")
    axes.set_ylabel("RMSE per released cell")
    axes.set_title(f"CUBE over {len(COLUMNS)} columns, {PEOPLE} people, total ε = {EPSILON:g}")
    axes.legend()
    figure.tight_layout()
    figure.savefig(plot_path, dpi=120)
    print(f"plot written to {plot_path}")
    connection.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "datacube.png")
