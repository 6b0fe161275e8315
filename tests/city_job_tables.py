"""Tables of (city, job) tuples for tests of columns without a declared domain: one row per user, so key bounding
keeps every row and the exact answers are DuckDB's."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql

SCHEMA = {"privacy_unit": "user_id", "max_rows_per_unit": 1, "columns": {"sex": {"categories": ["F", "M"]}, "city": "unknown", "job": "unknown"}}


def frame_of(units: dict[tuple[str | None, int], int]) -> pd.DataFrame:
    """``units[(city, job)]`` users per tuple, one row each; every third user is male."""
    tuples = [key for key, count in units.items() for _ in range(count)]
    return pd.DataFrame(
        {
            "user_id": np.arange(len(tuples)),
            "city": [c for c, _ in tuples],
            "job": np.array([j for _, j in tuples], dtype=np.int64),
            "sex": ["F" if i % 3 else "M" for i in range(len(tuples))],
        }
    )


def connection_with(frame: pd.DataFrame) -> dpsql.Connection:
    """A connection with a large budget and ``frame`` registered as ``logs``."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=100.0, delta=1e-5))
    connection.register("logs", frame, schema=SCHEMA)
    return connection


def exact(frame: pd.DataFrame, sql: str) -> dict[tuple[object, ...], int]:
    """DuckDB's answer to ``sql`` over ``frame`` as ``logs``: each row's count by its other columns."""
    return {tuple(row[:-1]): int(row[-1]) for row in duckdb.query_df(frame, "logs", sql).fetchall()}


@pytest.fixture
def frame(request: pytest.FixtureRequest) -> pd.DataFrame:
    """The test module's ``UNITS`` as a table."""
    return frame_of(request.module.UNITS)


@pytest.fixture
def logs(frame: pd.DataFrame) -> dpsql.Connection:
    return connection_with(frame)
