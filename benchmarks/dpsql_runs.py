"""dpsql's side of an accuracy benchmark: one statement run many times, each run's rows and 95 % intervals."""

from __future__ import annotations

import pandas as pd

import dpsql

Row = tuple[object, ...]


def released_runs(data: pd.DataFrame, schema: dict[str, object], sql: str, trials: int, epsilon: float) -> list[tuple[list[Row], list[Row]]]:
    """``trials`` independent releases of ``sql`` on table ``t`` at ``epsilon`` each (reuse off, so no run
    reads an earlier one's measurement): per run, the rows and ``cursor.confidence_interval(0.95)``."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=epsilon * trials), reuse=False)
    connection.register("t", data, schema=schema)
    cursor = connection.cursor()
    runs = []
    for _ in range(trials):
        rows = cursor.execute(sql, epsilon=epsilon).fetchall()
        runs.append((rows, cursor.confidence_interval(0.95)))
    connection.close()
    return runs
