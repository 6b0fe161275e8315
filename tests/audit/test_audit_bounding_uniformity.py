"""Uniformity of contribution bounding over salts: which of a unit's rows (or keys) survive bounding is a
uniform choice among the subsets of the bound's size, one fresh salt per statement (a chi-square test at
p > 10⁻³ over 160–240 salts; the design that put the salt last in HASH kept only 2 of the 6 pairs)."""

from __future__ import annotations

import itertools

import duckdb
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.keys import placeholder_domain
from dpsql.schema import Schema
from dpsql.sql.bounded import BoundedAggregation, KeyedColumn
from dpsql.sql.literals import ColumnType

BIGINT = ColumnType.of("BIGINT", "duckdb")


def kept_slots(database: duckdb.DuckDBPyConnection, bound: int, salt: int) -> tuple[int, ...]:
    """Which slots the single 4-row unit of table ``one`` keeps."""
    statement = BoundedAggregation(
        table="one",
        columns={"slot": Schema.load({"columns": {"slot": {"range": [0, 3]}}}).column("slot")},
        column_types={"slot": BIGINT},
        marginals=(("slot",),),
        privacy_unit="pid",
        max_rows_per_unit=bound,
        salt=salt,
        row_columns=("pid", "slot"),
    )
    counts = statement.marginal_arrays(DuckDBBackend(database).run(statement.statement().sql(dialect="duckdb")))[("slot",)]
    return tuple(int(i) for i in np.flatnonzero(counts))


@pytest.mark.parametrize(("bound", "salts"), [(1, 160), (2, 240)])
def test_choice_among_a_units_rows_is_uniform_over_salts(bound: int, salts: int) -> None:
    """Chi-square over which of the C(4, bound) subsets of a 4-row unit is kept, one salt per statement."""
    database = duckdb.connect()
    database.register("one", pd.DataFrame({"pid": [7, 7, 7, 7], "slot": [0, 1, 2, 3]}))
    subsets = {subset: 0 for subset in itertools.combinations(range(4), bound)}
    for salt in np.random.default_rng(2024).integers(0, 1 << 62, size=salts):
        subsets[kept_slots(database, bound, int(salt))] += 1  # KeyError if not exactly `bound` rows
    observed = np.array(list(subsets.values()))
    assert stats.chisquare(observed).pvalue > 1e-3, observed


def kept_keys(database: duckdb.DuckDBPyConnection, groups: int, salt: int) -> tuple[str, ...]:
    """Which keys the single unit of table ``keys`` (one row in each of keys a..d) keeps."""
    statement = BoundedAggregation(
        table="keys",
        columns={"key": placeholder_domain("key")},
        column_types={"key": ColumnType.of("VARCHAR", "duckdb")},
        marginals=(("key",),),
        privacy_unit="pid",
        max_rows_per_unit=4,
        salt=salt,
        row_columns=("pid", "key"),
        keyed=KeyedColumn("key", groups, 1, count_units=True),
    )
    histogram = statement.key_histogram(DuckDBBackend(database).run(statement.statement().sql(dialect="duckdb")))
    return tuple(sorted(str(key) for key in histogram.keys))


@pytest.mark.parametrize(("groups", "salts"), [(1, 160), (2, 240)])
def test_choice_among_a_units_keys_is_uniform_over_salts(groups: int, salts: int) -> None:
    """Chi-square over which of the C(4, k) key subsets a unit in 4 keys keeps (max_groups_per_unit = k).
    With the salt as HASH's last argument only 2 of the 6 pairs ever appeared."""
    database = duckdb.connect()
    database.register("keys", pd.DataFrame({"pid": [7, 7, 7, 7], "key": ["a", "b", "c", "d"]}))
    subsets = {subset: 0 for subset in itertools.combinations("abcd", groups)}
    for salt in np.random.default_rng(2025).integers(0, 1 << 62, size=salts):
        subsets[kept_keys(database, groups, int(salt))] += 1  # KeyError if not exactly `groups` keys
    observed = np.array(list(subsets.values()))
    assert stats.chisquare(observed).pvalue > 1e-3, observed
