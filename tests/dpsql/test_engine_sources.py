"""Every kind of source ``register`` accepts gives the same exact answers (noise disabled)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import dpsql
import dpsql.testing

SCHEMA = {"privacy_unit": None, "columns": {"sex": {"categories": ["F", "M"]}, "age": {"range": [20, 22]}}}
FRAME = pd.DataFrame({"sex": ["F", "M", "F", "F", "M"], "age": [20, 21, 22, 20, 20]})
QUERY = "SELECT sex, age, COUNT(*) AS n FROM t GROUP BY sex, age"
EXPECTED = [("F", 20, 2.0), ("F", 21, 0.0), ("F", 22, 1.0), ("M", 20, 1.0), ("M", 21, 1.0), ("M", 22, 0.0)]


def _answer(connection: dpsql.Connection) -> list[tuple]:
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute(QUERY, epsilon=0.5).fetchall()
    return [(s, a, round(n, 6)) for s, a, n in rows]


def _sources(tmp_path: Path) -> dict[str, object]:
    FRAME.to_csv(tmp_path / "t.csv", index=False)
    FRAME.to_parquet(tmp_path / "t.parquet")
    FRAME.to_json(tmp_path / "t.json", orient="records")
    return {
        "csv path": str(tmp_path / "t.csv"),
        "parquet Path": tmp_path / "t.parquet",
        "json path": str(tmp_path / "t.json"),
        "pandas": FRAME,
        "arrow": pa.Table.from_pandas(FRAME),
        "numpy dict": {"sex": FRAME["sex"].to_numpy(), "age": FRAME["age"].to_numpy()},
    }


def test_files_and_frames(tmp_path: Path) -> None:
    for kind, source in _sources(tmp_path).items():
        connection = dpsql.connect(budget=dpsql.Budget(10.0))
        connection.register("t", source, schema=SCHEMA)
        assert _answer(connection) == EXPECTED, kind


def test_existing_duckdb_tables(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    database = duckdb.connect(str(path))
    database.execute("CREATE TABLE t AS SELECT * FROM FRAME")
    database.execute("CREATE TABLE raw_people AS SELECT * FROM FRAME")
    database.close()
    connection = dpsql.connect(str(path), budget=dpsql.Budget(10.0))
    connection.register("t", schema=SCHEMA)  # the table named t
    assert _answer(connection) == EXPECTED
    connection.close()
    shared = duckdb.connect(str(path))
    connection = dpsql.connect(shared, budget=dpsql.Budget(10.0))  # an open DuckDB connection
    connection.register("t", "raw_people", schema=SCHEMA)  # another table, under the name the SQL uses
    assert _answer(connection) == EXPECTED
    connection.close()
    assert shared.execute("SELECT count(*) FROM raw_people").fetchone() == (5,)  # not closed by dpsql


def test_bad_sources(tmp_path: Path) -> None:
    connection = dpsql.connect(budget=dpsql.Budget(10.0))
    with pytest.raises(dpsql.ProgrammingError, match="no such data file"):
        connection.register("t", str(tmp_path / "absent.csv"), schema=SCHEMA)
    with pytest.raises(dpsql.ProgrammingError, match="cannot tell the format"):
        connection.register("t", str(tmp_path / "data.xlsx"), schema=SCHEMA)
    with pytest.raises(dpsql.ProgrammingError, match="cannot register a int"):
        connection.register("t", 42, schema=SCHEMA)
    with pytest.raises(dpsql.ProgrammingError, match="no table or view 'nothing'"):
        connection.register("nothing", schema=SCHEMA)
    with pytest.raises(dpsql.ProgrammingError, match="must be an identifier"):
        connection.register("bad name", FRAME, schema=SCHEMA)


def test_registered_view_is_not_reachable_from_sql() -> None:
    connection = dpsql.connect(budget=dpsql.Budget(10.0))
    connection.register("t", FRAME, schema=SCHEMA)
    with pytest.raises(dpsql.ProgrammingError, match="'__dpsql_t' is reserved"):
        connection.cursor().execute("SELECT COUNT(*) FROM __dpsql_t", epsilon=0.1)
    assert np.isclose(connection.budget_remaining(), 10.0)


def test_a_csv_whose_header_is_numbers_registers_under_those_names(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """nltcs.csv's header is 0,1,…,15: the schema names the columns "0", "1", …; the first line is the header."""
    path = tmp_path / "binary.csv"
    path.write_text("0,1,2\n1,0,1\n0,0,1\n1,1,1\n", encoding="utf-8")
    connection = dpsql.connect(budget=dpsql.Budget(10.0))
    columns = {str(i): {"categories": [0, 1]} for i in range(3)}
    connection.register("binary", str(path), schema={"columns": columns})
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute('SELECT "0", COUNT(*) FROM binary GROUP BY "0"', epsilon=1.0).fetchall()
    assert rows == [(0, pytest.approx(1.0)), (1, pytest.approx(2.0))]
