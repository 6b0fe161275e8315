"""A local-DP survey of Adult census data: no trusted curator.

Each of the 48,842 people randomizes her own (race, sex, income>50K) cell on her device with a
1-LDP randomizer optimized for the statements below, and sends only that report. The analyst answers
the same SQL from the reports, with standard errors, and compares with the exact counts and with a
survey that uses plain randomized response instead of the optimized randomizer.

    python examples/local_survey.py                            # Adult-like generated data (≈ 5 s)
    python examples/local_survey.py --data path/to/adult.csv   # the real integer-coded extract

The same from the shell (``dpsql demo --write .`` writes the generated adult.csv and adult.yaml):

    dpsql ldp design --schema adult.yaml --epsilon 1 --output survey.json \\
        'SELECT sex, race, COUNT(*) AS n FROM adult GROUP BY sex, race ORDER BY sex, race'
    dpsql ldp simulate --survey survey.json --data adult.csv --output reports.json
    dpsql ldp answer --survey survey.json --reports reports.json \\
        'SELECT sex, race, COUNT(*) AS n FROM adult GROUP BY sex, race ORDER BY sex, race'
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import duckdb

import dpsql.local
from dpsql import demo
from planner.ldp import Mechanism, randomized_response

HERE = Path(__file__).resolve().parent
STATEMENTS = [
    "SELECT sex, race, COUNT(*) AS n FROM adult GROUP BY sex, race ORDER BY sex, race",
    'SELECT race, COUNT(*) AS n FROM adult WHERE "income>50K" = 1 GROUP BY race ORDER BY race',
    'SELECT sex, COUNT(*) AS n FROM adult WHERE "income>50K" = 1 GROUP BY sex ORDER BY sex',
]


def exact_counts(data: Path, sql: str) -> dict[tuple[object, ...], int]:
    """The true counts (what no one in the local model ever sees), keyed by the group columns."""
    connection = duckdb.connect()
    connection.execute(f"CREATE VIEW adult AS SELECT * FROM read_csv('{data}')")
    return {tuple(row[:-1]): int(row[-1]) for row in connection.sql(sql).fetchall()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="a CSV with the Adult extract's integer codes (default: generated)")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="seed of the optimizer (the reports always come from OS entropy)")
    arguments = parser.parse_args()
    if arguments.data is None:
        arguments.data = demo.write_files(tempfile.mkdtemp(), seed=arguments.seed)[0]

    survey = dpsql.local.design(HERE / "adult.yaml", STATEMENTS, arguments.epsilon, seed=arguments.seed)
    print(survey.describe(), "\n")
    baseline = dpsql.local.Survey(
        survey.table,
        survey.schema,
        survey.statements,
        Mechanism.from_factorization(randomized_response(survey.workload_matrix, arguments.epsilon)),
    )
    optimized = survey.cursor(survey.simulate(str(arguments.data)))
    plain = baseline.cursor(baseline.simulate(str(arguments.data)))
    for sql in STATEMENTS:
        exact = exact_counts(arguments.data, sql)
        optimized.execute(sql)
        plain.execute(sql)
        print(sql)
        print(f"  {'group':>12}  {'exact':>7}  {'optimized ± stderr':>20}  {'randomized response ± stderr':>30}")
        for row, error, rr_row, rr_error in zip(optimized.fetchall(), optimized.errors, plain.fetchall(), plain.errors):
            key = row[:-1]
            print(
                f"  {str(key):>12}  {exact.get(key, 0):7d}  {row[-1]:9.0f} ± {error[-1]:8.0f}"
                f"  {rr_row[-1]:19.0f} ± {rr_error[-1]:8.0f}"
            )
        print()


if __name__ == "__main__":
    main()
