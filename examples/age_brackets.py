"""Age brackets by sex beside a sex × race table: one batch, one charge, consistent answers.

A typical publication: counts of people per age bracket broken down by sex, and the sex × race table.
`conn.workload` plans the statements together. The planner measures the age ranges by sex with a
range strategy and the sex × race table with its own, splits ε between them, and makes the two agree
exactly on the counts they share (per sex). It prints each answer with its standard error beside the
exact count of the generated table, and the expected error of answering each statement on its own
(ε split evenly, Laplace noise on every released cell) for comparison.

Run: ``python examples/age_brackets.py``
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import dpsql

EPSILON, PEOPLE, SEED = 1.0, 20_000, 2026
BRACKETS = [(18, 24), (25, 34), (35, 44), (45, 54), (55, 64), (65, 90)]
SCHEMA = {
    "privacy_unit": "person",
    "max_rows_per_unit": 1,
    "columns": {"age": {"range": [18, 90]}, "sex": {"categories": ["F", "M"]}, "race": {"categories": [0, 1, 2, 3, 4]}},
}


def generate(people: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "person": np.arange(people),
        "age": np.clip(np.round(rng.gamma(6.0, 7.0, people)), 18, 90).astype(int),
        "sex": rng.choice(["F", "M"], people),
        "race": rng.choice(5, people, p=[0.6, 0.2, 0.1, 0.07, 0.03]),
    })


def statements() -> list[str]:
    by_bracket = [f"SELECT sex, COUNT(*) FROM people WHERE age BETWEEN {low} AND {high} GROUP BY sex" for low, high in BRACKETS]
    return [*by_bracket, "SELECT sex, race, COUNT(*) FROM people GROUP BY sex, race"]


def run() -> tuple[str, list, pd.DataFrame]:
    """The strategy the planner chose (EXPLAIN: reads and charges nothing), the released result sets and
    the generated table."""
    frame = generate(PEOPLE, SEED)
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=EPSILON))
    connection.register("people", frame, schema=SCHEMA)
    batch = statements()
    explained = connection.workload(batch, epsilon=EPSILON, explain=True)[0].rows
    results = connection.workload(batch, epsilon=EPSILON)
    connection.close()
    return next(row[1] for row in explained if row[0] == "strategy"), results, frame


def report(strategy: str, results: list, frame: pd.DataFrame) -> str:
    lines = [f"strategy: {strategy}", f"{'statement':<12} {'group':<6} {'released':>10} {'± s.e.':>8} {'exact':>7}"]
    for (low, high), result in zip(BRACKETS, results):
        exact = frame[(frame.age >= low) & (frame.age <= high)].groupby("sex").size()
        for (sex, value), (_, error) in zip(result.rows, result.errors):
            lines.append(f"{f'age {low}-{high}':<12} {sex:<6} {value:>10.1f} {error:>8.1f} {exact.get(sex, 0):>7}")
    exact = frame.groupby(["sex", "race"]).size()
    for (sex, race, value), (_, _, error) in zip(results[-1].rows, results[-1].errors):
        lines.append(f"{'sex × race':<12} {f'{sex}, {race}':<6} {value:>10.1f} {error:>8.1f} {exact.get((sex, race), 0):>7}")
    for sex in ("F", "M"):
        brackets = sum(dict(result.rows)[sex] for result in results[:-1])
        table = sum(value for s, _, value in results[-1].rows if s == sex)
        lines.append(f"people of sex {sex}: {brackets:.3f} over the age brackets, {table:.3f} over the sex × race table")
    separate = np.sqrt(2) * len(results) / EPSILON  # each statement alone at ε/7: Laplace(7/ε) per cell
    lines.append(f"standard error per cell if each statement ran on its own at ε/{len(results)}: {separate:.1f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(*run()))
