"""What a notebook session with dpsql shows, as a script that saves the pictures.

Runs a few statements on Adult-like generated data (``dpsql.demo``), then saves

* ``released.png``: ``cursor.plot()`` — the released counts with their 95 % confidence intervals;
* ``cube.png``: the same for a ROLLUP batch result (subtotals consistent with their cells);
* ``budget.png``: ``dpsql.notebook.plot_budget`` — the ε spent over time, one step per statement;
* ``result.html`` and ``explain.html``: what Jupyter displays for a result and for an EXPLAIN.

    python examples/notebook_tour.py [OUTPUT_DIR]        # default: ./notebook_tour

Needs the ``examples`` extra (matplotlib, pandas): ``pip install -e ".[examples]"``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import dpsql  # noqa: E402
from dpsql import demo, notebook  # noqa: E402

STATEMENTS = (
    ("SELECT race, COUNT(*) AS n FROM adult GROUP BY race", 0.5),
    ('SELECT sex, COUNT(*) AS n, COUNT("income>50K") AS answered FROM adult WHERE "income>50K" = 1 GROUP BY sex', 0.25),
    ('SELECT sex, "income>50K", COUNT(*) AS n FROM adult GROUP BY ROLLUP (sex, "income>50K")', 0.5),
)


def run(output: Path) -> dict[str, Path]:
    """Run the statements and save the pictures and HTML into ``output``; returns them by name."""
    output.mkdir(parents=True, exist_ok=True)
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=2.0))
    connection.register("adult", demo.generate_adult(seed=1), schema=Path(__file__).resolve().parent / "adult.yaml")
    cursor = connection.cursor()
    saved: dict[str, Path] = {}
    for number, (sql, epsilon) in enumerate(STATEMENTS):
        cursor.execute(sql, epsilon=epsilon)
        print(cursor.df(errors=True).to_string(index=False), end="\n\n")
        if number == 0:
            saved["result.html"] = output / "result.html"
            saved["result.html"].write_text(cursor._repr_html_(), encoding="utf-8")
            cursor.plot().figure.savefig(saved.setdefault("released.png", output / "released.png"), dpi=110)
    cursor.plot().figure.savefig(saved.setdefault("cube.png", output / "cube.png"), dpi=110)
    cursor.execute("EXPLAIN " + STATEMENTS[0][0], epsilon=STATEMENTS[0][1])
    saved["explain.html"] = output / "explain.html"
    saved["explain.html"].write_text(cursor._repr_html_(), encoding="utf-8")
    axes = notebook.plot_budget(connection)
    axes.figure.savefig(saved.setdefault("budget.png", output / "budget.png"), dpi=110)
    print(f"budget left: epsilon = {connection.budget_remaining():.3g}; saved {', '.join(str(p) for p in saved.values())}")
    connection.close()
    return saved


if __name__ == "__main__":
    run(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("notebook_tour"))
