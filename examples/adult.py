"""Private counts on Adult census data, with a persistent budget.

    python examples/adult.py                            # Adult-like generated data (dpsql.demo)
    python examples/adult.py --data path/to/adult.csv   # the real integer-coded extract (same columns)
    python examples/adult.py --ledger adult.ledger      # rerun: the budget left carries over

The same from the shell (``dpsql demo --write .`` writes the generated adult.csv and adult.yaml):

    dpsql query --data adult.csv --schema examples/adult.yaml --budget-epsilon 2 --epsilon 0.5 \\
        'SELECT sex, race, COUNT(*) AS n FROM adult WHERE age BETWEEN 3 AND 23 GROUP BY sex, race'
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import dpsql
from dpsql import demo

HERE = Path(__file__).resolve().parent
STATEMENTS = (
    ("Sex by race, age codes 3-23", "SELECT sex, race, COUNT(*) AS n FROM adult WHERE age BETWEEN 3 AND 23 GROUP BY sex, race", 0.5),
    ("High earners by education code", 'SELECT "education-num", COUNT(*) AS n FROM adult WHERE "income>50K" = 1 GROUP BY "education-num"', 0.5),
    ("Total of people working 40+ hour codes", 'SELECT COUNT(*) AS n FROM adult WHERE "hours-per-week" >= 39', 0.25),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", type=Path, default=Path(tempfile.mkdtemp()) / "adult.ledger")
    parser.add_argument("--data", type=Path, help="a CSV with the Adult extract's integer codes (default: generated)")
    arguments = parser.parse_args()
    budget = None if arguments.ledger.exists() else dpsql.Budget(epsilon=2.0, delta=1e-6)
    with dpsql.connect(budget=budget, ledger=arguments.ledger) as connection:
        source = demo.generate_adult() if arguments.data is None else str(arguments.data)
        connection.register("adult", source, schema=HERE / "adult.yaml")
        print(f"budget left: epsilon = {connection.budget_remaining():.3f} (ledger {arguments.ledger})\n")
        cursor = connection.cursor()
        for title, sql, epsilon in STATEMENTS:
            try:
                cursor.execute(sql, epsilon=epsilon)
            except dpsql.BudgetExceededError as error:
                print(f"{title}: refused, {error}")
                continue
            names = [d[0] for d in cursor.description]
            print(f"{title} (epsilon = {epsilon}): {', '.join(names)}")
            for row, errors in zip(cursor.fetchall(), cursor.errors):
                print("  " + "  ".join(f"{v:9.1f} ± {e:5.1f}" if e is not None else f"{v!s:>4}" for v, e in zip(row, errors)))
            print(f"  budget left: epsilon = {connection.budget_remaining():.3f}\n")


if __name__ == "__main__":
    main()
