"""Where the time goes: one CUBE over 4 columns on a generated 10-million-row table, per engine.

The table ``events`` (privacy unit ``unit_id``, 3 rows per unit, at most 2 kept) is generated inside
each engine from the same integer formulas (sqlglot transpiles them), so every engine holds the same
rows: DuckDB (in memory), PostgreSQL (an UNLOGGED table, default server settings) and Spark local
(``local[2]``, a Parquet file in a temporary directory). dpsql then runs::

    SELECT a, b, c, d, COUNT(*) FROM events GROUP BY CUBE (a, b, c, d)

(16 grouping sets, 2,970 released rows) with real noise, twice: cold (planning included, and the
table's bounded rows computed and kept in the engine: a temporary table, in Spark a cached view) and
warm (the plan cached, the aggregation over the kept bounded rows). A timing wrapper around the backend
measures the engine's time for those statements; everything else — parsing, planning, noise,
reconstruction, the ledger — is dpsql's part. Target: dpsql's part under 10% of the total on every engine.

Run (PostgreSQL from ``eval "$(bash .ci/services.sh)"`` or ``--postgres DSN``)::

    /work/venv/bin/python benchmarks/backends.py [--rows 10000000] [--engines duckdb,postgres,spark]

Writes ``benchmarks/results/backends.csv`` and ``backends.png``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import sqlglot

import dpsql
from dpsql.backends.base import Backend
from dpsql.backends.dialects import POSTGRES, SPARK
from dpsql.backends.factory import open_backend
from results_io import RESULTS, write_csv

STATEMENT = "SELECT a, b, c, d, COUNT(*) FROM events GROUP BY CUBE (a, b, c, d)"
#: the columns of `events` as DuckDB expressions of the row number i (transpiled for the others)
COLUMNS = {
    "unit_id": "i // 3",
    "a": "(i * 2654435761) % 1000003 % 8",
    "b": "(i * 40503 + 17) % 65537 % 10",
    "c": "(i * 97 + 5) % 1009",
    "d": "(i * 7919) % 10007 % 5",
}
SCHEMA = {
    "privacy_unit": "unit_id",
    "max_rows_per_unit": 2,
    "columns": {
        "a": {"categories": list(range(8))},
        "b": {"range": [0, 9]},
        "c": {"bins": [0, 100, 250, 500, 1009]},
        "d": {"categories": list(range(5))},
    },
}


@dataclass
class TimedBackend:
    """A backend that times every statement it runs (and otherwise is the wrapped one)."""

    inner: Backend
    run_seconds: list[float] = field(default_factory=list)

    @property
    def dialect(self) -> str:  # type: ignore[override]
        return self.inner.dialect

    def run(self, sql: str) -> dict[str, np.ndarray]:
        start = time.perf_counter()
        try:
            return self.inner.run(sql)
        finally:
            self.run_seconds.append(time.perf_counter() - start)

    def create_temporary(self, name: str, query: str) -> None:
        """The table's bounded rows, kept by the first read (engine time, like ``run``); an engine that
        keeps no relations (Spark) fails the probe at register, so dpsql bounds within every statement."""
        create = getattr(self.inner, "create_temporary", None)
        if create is None:
            raise dpsql.OperationalError(f"{type(self.inner).__name__} keeps no relations")
        start = time.perf_counter()
        try:
            create(name, query)
        finally:
            self.run_seconds.append(time.perf_counter() - start)

    def drop_temporary(self, name: str) -> None:
        self.inner.drop_temporary(name)  # type: ignore[attr-defined]

    def describe(self, table: str) -> dict[str, str]:
        return self.inner.describe(table)

    def has_relation(self, name: str) -> bool:
        return self.inner.has_relation(name)  # type: ignore[attr-defined]

    def register(self, internal_name: str, source: object) -> None:
        self.inner.register(internal_name, source)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.inner.close()


def select_rows(dialect: str, source: str, row_number: str) -> str:
    """``SELECT <COLUMNS> FROM <source>`` in ``dialect``, with ``i`` renamed to ``row_number``."""
    columns = ", ".join(f"{expression} AS {name}" for name, expression in COLUMNS.items())
    tree = sqlglot.parse_one(f"SELECT {columns} FROM t", read="duckdb")
    for column in tree.find_all(sqlglot.exp.Column):
        if column.name == "i":
            column.replace(sqlglot.exp.column(row_number))
    return tree.sql(dialect=dialect).replace(" FROM t", f" FROM {source}")


def duckdb_engine(rows: int) -> tuple[object, Callable[[], None]]:
    connection = duckdb.connect()
    connection.execute(f"CREATE TABLE events AS {select_rows('duckdb', f'range({rows}) AS t(i)', 'i')}")
    return connection, connection.close


def postgres_engine(rows: int, dsn: str) -> tuple[object, Callable[[], None]]:
    import psycopg

    admin = psycopg.connect(dsn, autocommit=True)
    admin.execute("DROP TABLE IF EXISTS events")
    source = f"generate_series(CAST(0 AS BIGINT), {rows - 1}) AS t(i)"
    admin.execute(f"CREATE UNLOGGED TABLE events AS {select_rows(POSTGRES, source, 'i')}")
    admin.execute("ANALYZE events")

    def drop() -> None:
        admin.execute("DROP TABLE IF EXISTS events")
        admin.close()

    return dsn, drop


def spark_engine(rows: int) -> tuple[object, Callable[[], None]]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("dpsql-benchmark")
        .config("spark.driver.memory", "6g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    directory = tempfile.TemporaryDirectory(prefix="dpsql-spark-")
    path = os.path.join(directory.name, "events.parquet")
    session.sql(select_rows(SPARK, f"range({rows})", "id")).write.parquet(path)
    session.read.parquet(path).createOrReplaceTempView("events")

    def stop() -> None:
        session.stop()
        directory.cleanup()

    return session, stop


def measure(engine: str, spec: object, repeats: int) -> list[dict]:
    backend = TimedBackend(open_backend(spec))
    connection = dpsql.connect(backend=backend, budget=dpsql.Budget(epsilon=100.0), reuse=False)  # every run reads
    connection.register("events", schema=SCHEMA)
    backend.run_seconds.clear()  # the probe for temporary tables at register()
    measured = []
    for run in range(repeats):
        backend.run_seconds.clear()
        start = time.perf_counter()
        cursor = connection.cursor()
        cursor.execute(STATEMENT, epsilon=1.0)
        released = len(cursor.fetchall())
        total = time.perf_counter() - start
        database = sum(backend.run_seconds)
        measured.append(
            {
                "engine": engine,
                "run": "cold (plans)" if run == 0 else "warm (cached plan)",
                "statements_sent": len(backend.run_seconds),
                "rows_released": released,
                "database_s": round(database, 3),
                "dpsql_s": round(total - database, 3),
                "total_s": round(total, 3),
                "dpsql_share": round((total - database) / total, 4),
            }
        )
    connection.close()
    return measured


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['engine']}\n{r['run'].split()[0]}" for r in rows]
    database = [r["database_s"] for r in rows]
    dpsql_part = [r["dpsql_s"] for r in rows]
    figure, axes = plt.subplots(figsize=(8, 4))
    axes.bar(labels, database, label="database: bounded aggregation")
    axes.bar(labels, dpsql_part, bottom=database, label="dpsql: parse, plan, noise, reconstruct")
    axes.set_ylabel("seconds")
    axes.set_title(f"CUBE over 4 columns, {rows[0]['table_rows']:,} rows")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--engines", default="duckdb,postgres,spark")
    parser.add_argument("--postgres", default=os.environ.get("DPSQL_TEST_POSTGRES_DSN"), help="PostgreSQL DSN")
    parser.add_argument("--repeats", type=int, default=2)
    arguments = parser.parse_args()
    engines = arguments.engines.split(",")
    if "postgres" in engines and not arguments.postgres:
        parser.error('postgres needs --postgres DSN (or eval "$(bash .ci/services.sh)")')
    rows = []
    for engine in engines:
        start = time.perf_counter()
        if engine == "duckdb":
            spec, release = duckdb_engine(arguments.rows)
        elif engine == "postgres":
            spec, release = postgres_engine(arguments.rows, arguments.postgres)
        elif engine == "spark":
            spec, release = spark_engine(arguments.rows)
        else:
            parser.error(f"unknown engine {engine!r}")
        load = time.perf_counter() - start
        try:
            for row in measure(engine, spec, arguments.repeats):
                rows.append({**row, "table_rows": arguments.rows, "load_s": round(load, 1)})
                print(
                    f"{engine:9} {row['run']:19} database {row['database_s']:8.2f} s   dpsql {row['dpsql_s']:6.2f} s   "
                    f"dpsql share {100 * row['dpsql_share']:5.1f} %   ({row['statements_sent']} statement, "
                    f"{row['rows_released']} rows; table generated in {load:.0f} s)",
                    flush=True,
                )
        finally:
            release()
    write_csv("backends.csv", rows)
    plot(rows, RESULTS / "backends.png")
    print(f"wrote {RESULTS / 'backends.csv'} and {RESULTS / 'backends.png'}")


if __name__ == "__main__":
    main()
