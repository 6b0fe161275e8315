"""Contribution bounding in the bounded statement: how many rows each unit keeps, which ones (the
same as ranking every unit's rows with the salted-hash window), and that the choice is uniform."""

from __future__ import annotations


import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot

from recording_backend import RecordingBackend

import dpsql
import dpsql.testing
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.schema import Schema
from dpsql.sql.bounded import BoundedAggregation
from dpsql.sql.compile import CellFilter
from dpsql.sql.literals import ColumnType

BIGINT = ColumnType.of("BIGINT", "duckdb")
COLUMNS = ("pid", "unit_copy", "slot", "tag")  # the table's columns, in order: every row's identity

SIZES = (1, 2, 3, 4, 5, 8)  # rows per unit: below, at and above the bound of 3
BOUND = 3
SLOTS = 8


def units_frame(seed: int, units_per_size: int = 40) -> pd.DataFrame:
    """Units of every size in SIZES, rows shuffled; ``slot`` distinct within a unit, ``tag`` in 0..2."""
    rng = np.random.default_rng(seed)
    sizes = np.repeat(SIZES, units_per_size)
    unit = np.repeat(np.arange(len(sizes)), sizes)
    slot = np.concatenate([rng.permutation(SLOTS)[:size] for size in sizes])
    frame = pd.DataFrame({"pid": unit, "unit_copy": unit, "slot": slot, "tag": rng.integers(0, 3, len(unit))})
    return frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def schema_for(frame: pd.DataFrame) -> Schema:
    return Schema.load(
        {
            "privacy_unit": "pid",
            "max_rows_per_unit": BOUND,
            "columns": {
                "unit_copy": {"range": [0, int(frame["pid"].max())]},
                "slot": {"range": [0, SLOTS - 1]},
                "tag": {"range": [0, 2]},
            },
        }
    )


def aggregation(
    schema: Schema, columns: tuple[str, ...], salt: int, bound: int = BOUND, row_filters: tuple[CellFilter, ...] = ()
) -> BoundedAggregation:
    return BoundedAggregation(
        table="t",
        columns={name: schema.column(name) for name in columns},
        column_types=dict.fromkeys(columns, BIGINT),
        marginals=(columns,),
        privacy_unit="pid",
        max_rows_per_unit=bound,
        salt=salt,
        row_columns=COLUMNS,
        row_filters=row_filters,
    )


def bounded_counts(database: duckdb.DuckDBPyConnection, statement: BoundedAggregation) -> np.ndarray:
    backend = DuckDBBackend(database)
    return statement.marginal_arrays(backend.run(statement.statement().sql(dialect="duckdb")))[statement.marginals[0]]


def window_counts(database: duckdb.DuckDBPyConnection, columns: tuple[str, ...], salt: int, where: str = "TRUE") -> pd.DataFrame:
    """The reference: every unit's rows numbered by the window alone (ordered by the salted hash of the unit
    and the row's identity, a hash of all its columns), the first BOUND kept, then ``where`` applied."""
    listed = ", ".join(columns)
    identity = f"HASH({', '.join(COLUMNS)})"
    return database.execute(
        f"SELECT {listed}, COUNT(*) AS n FROM ("
        f"  SELECT *, ROW_NUMBER() OVER (PARTITION BY pid ORDER BY HASH(HASH(pid, {identity}, {salt}))) AS r FROM t"
        f") WHERE r <= {BOUND} AND ({where}) GROUP BY {listed} ORDER BY {listed}"
    ).df()


@pytest.fixture(scope="module")
def database() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    frame = units_frame(seed=5)
    connection.register("t", frame)
    return connection


def test_every_unit_keeps_min_of_its_rows_and_the_bound(database: duckdb.DuckDBPyConnection) -> None:
    frame = database.execute("SELECT * FROM t").df()
    schema = schema_for(frame)
    for bound in (1, BOUND, 5):
        kept = bounded_counts(database, aggregation(schema, ("unit_copy",), salt=77, bound=bound))
        sizes = frame.groupby("pid").size().reindex(range(len(kept)), fill_value=0).to_numpy()
        np.testing.assert_array_equal(kept, np.minimum(sizes, bound), err_msg=f"bound {bound}")


@pytest.mark.parametrize("salt", [1, 2**61 + 17, 987_654_321])
def test_kept_rows_are_those_of_the_plain_window(database: duckdb.DuckDBPyConnection, salt: int) -> None:
    """Skipping the ranking of units within the bound changes nothing: per (unit, slot), the same rows."""
    schema = schema_for(database.execute("SELECT * FROM t").df())
    kept = bounded_counts(database, aggregation(schema, ("unit_copy", "slot"), salt=salt))
    reference = window_counts(database, ("unit_copy", "slot"), salt)
    expected = np.zeros_like(kept)
    np.add.at(expected, (reference["unit_copy"].to_numpy(), reference["slot"].to_numpy()), reference["n"].to_numpy())
    np.testing.assert_array_equal(kept, expected)
    assert kept.sum() == sum(min(size, BOUND) for size in SIZES) * 40


def test_where_applies_to_the_bounded_rows(database: duckdb.DuckDBPyConnection) -> None:
    """A unit keeps the same rows whatever the WHERE clause: per unit, the statement with ``slot >= 5``
    counts the window's kept rows (ranked over all the unit's rows) that have ``slot >= 5``."""
    schema = schema_for(database.execute("SELECT * FROM t").df())
    mask = np.arange(SLOTS) >= 5
    statement = aggregation(schema, ("unit_copy", "slot"), salt=3, row_filters=(CellFilter(("slot",), mask),))
    kept = bounded_counts(database, statement)
    reference = window_counts(database, ("unit_copy", "slot"), salt=3, where="slot >= 5")
    expected = np.zeros_like(kept)
    np.add.at(expected, (reference["unit_copy"].to_numpy(), reference["slot"].to_numpy()), reference["n"].to_numpy())
    np.testing.assert_array_equal(kept, expected)
    matching = database.execute("SELECT COUNT(*) FROM t WHERE slot >= 5").fetchone()[0]
    assert 0 < kept.sum() < matching  # some units over the bound kept rows outside the WHERE clause instead


def salt_of(sql: str) -> int:
    """The salt of the statement's ranking hash (the last argument of the inner HASH of the order key)."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    (salt,) = [h.expressions[-1] for h in tree.find_all(sqlglot.exp.Anonymous) if isinstance(h.expressions[-1], sqlglot.exp.Literal)]
    return int(salt.name)


def test_noise_free_answers_equal_the_exact_answers_on_the_bounded_rows(database: duckdb.DuckDBPyConnection) -> None:
    backend = RecordingBackend(database)
    connection = dpsql.connect(backend, budget=dpsql.Budget(1000.0))
    schema = {"privacy_unit": "pid", "max_rows_per_unit": BOUND, "columns": {"slot": {"range": [0, SLOTS - 1]}, "tag": {"range": [0, 2]}}}
    connection.register("t", None, schema=schema)
    queries = {
        "SELECT tag, slot, COUNT(*) FROM t GROUP BY tag, slot": "TRUE",
        "SELECT tag, COUNT(*) FROM t WHERE slot BETWEEN 2 AND 6 GROUP BY tag": "slot BETWEEN 2 AND 6",
    }
    for seed, (sql, where) in enumerate(queries.items()):
        with dpsql.testing.noise_disabled(), dpsql.testing.seeded(seed):
            rows = connection.cursor().execute(sql, epsilon=1.0).fetchall()
        grouped = ("tag", "slot") if "tag, slot" in sql else ("tag",)
        reference = window_counts(database, grouped, salt_of(backend.statements[0]), where)  # [0]: the kept bounded rows
        expected = {tuple(row[:-1]): float(row[-1]) for row in reference.itertuples(index=False)}
        answered = {tuple(row[:-1]): round(row[-1], 6) for row in rows}
        assert len(answered) == 3 * (SLOTS if len(grouped) == 2 else 1)  # every cell of the domain
        assert answered == {key: expected.get(key, 0.0) for key in answered}
        assert sum(answered.values()) == sum(expected.values())  # no kept row outside the answered cells
        (matching,) = database.execute(f"SELECT COUNT(*) FROM t WHERE {where}").fetchone()
        assert sum(expected.values()) < matching  # bounding dropped rows





