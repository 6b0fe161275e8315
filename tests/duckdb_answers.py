"""DuckDB's exact answer to a statement on a frame, for comparing with dpsql's noise-free release; and the
check of a rejected corpus statement."""

from __future__ import annotations

import decimal
import math
import re
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pandas as pd
import pytest

import dpsql

Row = tuple[object, ...]


def duckdb_rows(sql: str, tables: dict[str, pd.DataFrame]) -> tuple[list[str], list[Row]]:
    """Column names and rows of ``sql`` run by DuckDB over ``tables`` (registered under their names)."""
    connection = duckdb.connect()
    for name, frame in tables.items():
        connection.register(name, frame)
    cursor = connection.execute(sql)
    names = [column[0] for column in cursor.description]
    rows = cursor.fetchall()
    connection.close()
    return names, rows


def same_value(released: object, exact: object, tolerance: float = 1e-6) -> bool:
    """A released value equals DuckDB's: numbers within ``tolerance`` (relative for large ones), others equal."""
    if released is None or exact is None:
        return released is None and exact is None
    if isinstance(exact, (int, float, decimal.Decimal)) and not isinstance(exact, bool):
        if not isinstance(released, (int, float, decimal.Decimal)):
            return False
        return math.isclose(float(released), float(exact), rel_tol=tolerance, abs_tol=tolerance)
    return released == exact


def assert_same_rows(released: Sequence[Row], exact: Sequence[Row], ordered: bool = False) -> None:
    """The same rows (as multisets, or in order when ``ordered``), values compared by :func:`same_value`."""
    assert len(released) == len(exact), (len(released), len(exact), released[:5], exact[:5])
    if not ordered:
        key = lambda row: tuple((v is None, str(type(v)), round(v, 4) if isinstance(v, float) else v) for v in row)  # noqa: E731
        released, exact = sorted(released, key=key), sorted(exact, key=key)
    for mine, theirs in zip(released, exact):
        assert len(mine) == len(theirs) and all(same_value(a, b) for a, b in zip(mine, theirs)), (mine, theirs)


def assert_cells_match(released: Sequence[Row], errors: Sequence[Row], exact: Sequence[Row]) -> None:
    """dpsql's rows of a GROUP BY (one per cell of the declared domain) against DuckDB's (one per non-empty
    group): the key columns are those without error bars; every DuckDB row is released with its values, and a
    released row DuckDB has no row for is an empty cell (its counts 0)."""
    keys = [i for i in range(len(released[0]) if released else 0) if all(e[i] is None for e in errors)]
    found = {tuple(row[i] for i in keys): row for row in released}
    for row in exact:
        key = tuple(row[i] for i in keys)
        assert key in found, (key, sorted(found, key=str)[:5])
        assert all(same_value(a, b) for a, b in zip(found.pop(key), row)), (found.get(key), row)
    for row in found.values():
        assert all(row[i] in (0, 0.0, None) for i in range(len(row)) if i not in keys), row


def assert_same_names(released: Sequence[str], exact: Sequence[str], sql: str) -> None:
    """dpsql names a column as DuckDB does where the SQL names it (an alias, a column); an unaliased
    expression dpsql names by its text (``COUNT(*)``), DuckDB by its own rendering (``count_star()``)."""
    assert len(released) == len(exact), (released, exact)
    for mine, theirs in zip(released, exact):
        if theirs.lower() in sql.lower() and not any(c in theirs for c in "()"):
            assert mine.lower() == theirs.lower(), (released, exact)


def assert_refused_as_expected(path: Path, connection: dpsql.Connection) -> None:
    """A rejected corpus file (first line ``-- expect: <ErrorClass> <words of the message>``) is refused with
    that class and a one-line message holding those words, before anything is charged."""
    header, sql = path.read_text().split("\n", 1)
    match = re.match(r"^-- expect: (\w+) (.+)$", header)
    assert match, f"{path.name} must start with '-- expect: <ErrorClass> <words of the message>'"
    expected = getattr(dpsql, match.group(1))
    with pytest.raises(expected) as raised:
        connection.cursor().execute(sql, epsilon=0.5)
    assert type(raised.value) is expected
    assert match.group(2).lower() in str(raised.value).lower(), str(raised.value)
    assert "\n" not in str(raised.value)
    assert connection.budget_spent().statements == 0
