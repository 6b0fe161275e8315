"""The per-statement caches: texts parsed and bound once, compiled batches and backend SQL memoised by
every field of their inputs (a different input is never served an old result)."""

from __future__ import annotations

import numpy as np
import pandas as pd

import dpsql
import dpsql.testing
from dpsql import pipeline
from dpsql.session import _frozen
from dpsql.sql.compile import CellFilter


def test_frozen_keys_tell_types_arrays_and_nesting_apart() -> None:
    assert _frozen((1, "a")) == _frozen([1, "a"]) != _frozen((1.0, "a")) != _frozen((True, "a"))
    mask = np.array([True, False, True])
    assert _frozen(CellFilter(("x",), mask)) == _frozen(CellFilter(("x",), mask.copy()))
    assert _frozen(CellFilter(("x",), mask)) != _frozen(CellFilter(("x",), ~mask))
    assert _frozen(CellFilter(("x",), mask)) != _frozen(CellFilter(("x",), mask.reshape(1, 3)))
    assert _frozen({"a": 1}) != _frozen({"a": 2})


def test_memoised_answers_equal_fresh_ones_and_never_cross_inputs() -> None:
    frame = pd.DataFrame({"pid": np.arange(300) // 2, "x": np.arange(300) % 7, "y": np.arange(300) % 3})
    schema = {"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {"x": {"range": [0, 6]}, "y": {"range": [0, 2]}}}
    connection = dpsql.connect(budget=dpsql.Budget(1000.0), reuse=False)
    connection.register("t", frame, schema=schema)
    statements = [f"SELECT y, COUNT(*) FROM t WHERE x <= {k} GROUP BY y" for k in range(7)]
    with dpsql.testing.noise_disabled():
        first = [connection.cursor().execute(s, epsilon=1.0).fetchall() for s in statements]
        again = [connection.cursor().execute(s, epsilon=1.0).fetchall() for s in statements]  # from the caches
        bound = [connection.cursor().execute("SELECT y, COUNT(*) FROM t WHERE x <= ? GROUP BY y", (k,), epsilon=1.0).fetchall() for k in range(7)]
    assert first == again == bound
    totals = [sum(n for _, n in rows) for rows in first]
    assert totals == sorted(totals) and len(set(totals)) == 7  # every threshold got its own statement
    pipeline._bound_text.cache_clear()
    with dpsql.testing.noise_disabled():
        assert [connection.cursor().execute(s, epsilon=1.0).fetchall() for s in statements] == first
