"""Reading a benchmark table the same way in every environment (dpsql's and each peer's): the CSV with its
column names made SQL identifiers (``hours-per-week`` → ``hours_per_week``, ``income>50K`` → ``income_50K``).
Only pandas is needed, so the peers' environments can import it too."""

from __future__ import annotations

import pandas as pd


def sql_name(name: str) -> str:
    return name.replace("-", "_").replace(">", "_")


def read_table(path: object, columns: list[str] | None = None) -> pd.DataFrame:
    """The CSV at ``path`` with SQL-identifier column names, only ``columns`` when given (in that order)."""
    data = pd.read_csv(path)
    data.columns = [sql_name(c) for c in data.columns]
    return data if columns is None else data[columns]
