"""The client matrix of docs/serve.md: every client × connect / COUNT / AVG / CUBE / parameterised /
refused / SHOW / SET, each cell checked against DuckDB's exact answer with the noise switched off in
this process (the server runs on a thread of it). Clients that install with the ``test`` extra run
always (psql where PostgreSQL's client is installed); node-postgres, pgjdbc, SQLAlchemy 1.4 and Superset
run when their environment is there (``benchmarks/clients/README.md``: ``DPSQL_NODE_MODULES``, the pgjdbc
jar, ``DPSQL_SQLALCHEMY14_PYTHON``, ``DPSQL_SUPERSET_PYTHON``) and are skipped otherwise. Also here: what the catalog shows BI tools
(SQLAlchemy's inspector, information_schema), parameters every driver sends, error bars over the wire."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import psycopg
import pytest
import sqlalchemy

import dpsql.testing
from dpsql.serve import Server, hash_password
from serve_helpers import exact, psql_binary, running, write_config

USER, PASSWORD = "matrix", "matrix-secret"
COUNT = "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex"
AVG = "SELECT sex, AVG(age) AS a FROM adult GROUP BY sex"
CUBE = "SELECT sex, job, COUNT(*) AS n FROM adult GROUP BY CUBE (sex, job)"
PARAMETERISED = "SELECT sex, COUNT(*) AS n FROM adult WHERE age > {} GROUP BY sex"  # {}: the driver's placeholder
REFUSED = "SELECT * FROM adult"
CELLS = ("connect", "COUNT", "AVG", "CUBE", "parameterised", "refused", "SHOW", "SET")


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    from conftest import make_adult

    return make_adult(persons=400, seed=5)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frame: pd.DataFrame, adult_schema: dict[str, object]) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("clients")
    analyst = {"password": hash_password(PASSWORD), "budget": {"epsilon": 1000.0, "delta": 1e-6}, "default_epsilon": 0.5}
    with running(write_config(directory, frame, adult_schema, analysts={USER: analyst})) as started:
        yield started


def truth(frame: pd.DataFrame) -> dict[str, list[tuple[object, ...]]]:
    return {
        "COUNT": exact(frame, COUNT.replace(" AS n", "")),
        "AVG": exact(frame, AVG.replace(" AS a", "")),
        "CUBE": exact(frame, CUBE.replace(" AS n", "")),
        "parameterised": exact(frame, PARAMETERISED.format(40).replace(" AS n", "")),
    }


def same(released: list[tuple[object, ...]], expected: list[tuple[object, ...]]) -> bool:
    """Same keys (any order), values equal up to the rounding of least squares."""
    key = lambda row: (tuple((v is None, str(v)) for v in row[:-1]), round(float(row[-1]), 3))  # noqa: E731
    if len(released) != len(expected):
        return False
    return all(
        tuple(map(str, a[:-1])) == tuple(map(str, b[:-1])) and math.isclose(float(a[-1]), float(b[-1]), rel_tol=1e-9, abs_tol=1e-6)  # type: ignore[arg-type]
        for a, b in zip(sorted(released, key=key), sorted(expected, key=key))
    )


def check(cells: dict[str, object], frame: pd.DataFrame) -> None:
    """Every cell of a client's row of the matrix holds."""
    expected = truth(frame)
    assert set(cells) == set(CELLS), cells
    assert cells["connect"] in ([(1,)], [[1]], [1], 1), cells["connect"]
    for name in ("COUNT", "AVG", "CUBE", "parameterised"):
        rows = [tuple(row) for row in cells[name]]  # type: ignore[attr-defined]
        assert same(rows, expected[name]), (name, rows, expected[name])
    assert cells["refused"] == "0A000"
    epsilon, delta, rho = (float(v) for v in list(cells["SHOW"])[0])  # type: ignore[call-overload]
    assert 0 < epsilon <= 1000 and delta <= 1e-6
    assert math.isclose(float(cells["SET"]), 0.25)  # type: ignore[arg-type]


# -- clients that install with the test extra --------------------------------------------------------
def psycopg3_cells(host: str, port: int) -> dict[str, object]:
    with psycopg.connect(f"host={host} port={port} user={USER} password={PASSWORD} dbname=dpsql", autocommit=True) as connection:
        def run(sql: str, *parameters: object) -> list[tuple[object, ...]]:
            cursor = connection.execute(sql, parameters or None)
            return cursor.fetchall() if cursor.description else []

        return _cells(run, lambda sql: _sqlstate(lambda: run(sql), psycopg.Error), "%s")


def psycopg2_cells(host: str, port: int) -> dict[str, object]:
    import psycopg2

    connection = psycopg2.connect(host=host, port=port, user=USER, password=PASSWORD, dbname="dpsql")
    connection.autocommit = True
    try:
        def run(sql: str, *parameters: object) -> list[tuple[object, ...]]:
            with connection.cursor() as cursor:
                cursor.execute(sql, parameters or None)
                return cursor.fetchall() if cursor.description else []

        return _cells(run, lambda sql: _sqlstate(lambda: run(sql), psycopg2.Error, "pgcode"), "%s")
    finally:
        connection.close()


def asyncpg_cells(host: str, port: int) -> dict[str, object]:
    import asyncpg

    async def main() -> dict[str, object]:
        connection = await asyncpg.connect(host=host, port=port, user=USER, password=PASSWORD, database="dpsql")
        try:
            results: dict[str, object] = {}

            async def run(sql: str, *parameters: object) -> list[tuple[object, ...]]:
                return [tuple(r) for r in await connection.fetch(sql, *parameters)]  # Parse, Describe, Bind: binary results

            results["connect"] = await run("SELECT 1")
            for name, sql in (("COUNT", COUNT), ("AVG", AVG), ("CUBE", CUBE)):
                results[name] = await run(sql)
            results["parameterised"] = await run(PARAMETERISED.format("$1"), 40)
            try:
                await run(REFUSED)
            except asyncpg.PostgresError as error:
                results["refused"] = error.sqlstate
            results["SHOW"] = await run("SHOW dpsql.budget")
            before = (await run("SHOW dpsql.budget"))[0][0]
            await connection.execute("SET dpsql.epsilon = 0.25")
            await run("SELECT COUNT(*) FROM adult WHERE age > $1", 33)
            results["SET"] = before - (await run("SHOW dpsql.budget"))[0][0]
            await connection.execute("RESET dpsql.epsilon")
            return results
        finally:
            await connection.close()

    return asyncio.run(main())


def pg8000_cells(host: str, port: int) -> dict[str, object]:
    import pg8000.dbapi

    connection = pg8000.dbapi.connect(host=host, port=port, user=USER, password=PASSWORD, database="dpsql")
    connection.autocommit = True
    try:
        def run(sql: str, *parameters: object) -> list[tuple[object, ...]]:
            cursor = connection.cursor()
            cursor.execute(sql, parameters)  # no parameters: the simple protocol
            return [tuple(r) for r in cursor.fetchall()] if cursor.description else []

        def refused(sql: str) -> str:
            try:
                run(sql)
            except pg8000.dbapi.DatabaseError as error:
                return str(error.args[0]["C"])
            return "released"

        return _cells(run, refused, "%s")
    finally:
        connection.close()


def _cells(run: Callable[..., list[tuple[object, ...]]], refused: Callable[[str], str], placeholder: str) -> dict[str, object]:
    cells: dict[str, object] = {"connect": run("SELECT 1")}
    for name, sql in (("COUNT", COUNT), ("AVG", AVG), ("CUBE", CUBE)):
        cells[name] = run(sql)
    cells["parameterised"] = run(PARAMETERISED.format(placeholder), 40)
    cells["refused"] = refused(REFUSED)
    cells["SHOW"] = run("SHOW dpsql.budget")
    before = run("SHOW dpsql.budget")[0][0]
    run("SET dpsql.epsilon = 0.25")
    run(f"SELECT COUNT(*) FROM adult WHERE age > {placeholder}", 34)
    cells["SET"] = float(before) - float(run("SHOW dpsql.budget")[0][0])  # type: ignore[arg-type]
    run("RESET dpsql.epsilon")
    return cells


def _sqlstate(call: Callable[[], object], error_type: type[BaseException], attribute: str = "sqlstate") -> str:
    try:
        call()
    except error_type as error:
        return str(getattr(error, attribute))
    return "released"


def psql_cells(host: str, port: int) -> dict[str, object]:
    psql = psql_binary()
    if psql is None:
        pytest.skip(reason="psql is not installed (.ci/services.sh installs PostgreSQL)")

    def run(*commands: str) -> tuple[list[list[str]], str]:
        arguments = [psql, "-X", "-q", "-A", "-t", "-F", "|", "-v", "VERBOSITY=verbose", "-h", host, "-p", str(port), "-U", USER, "-d", "dpsql"]
        for command in commands:
            arguments += ["-c", command]
        done = subprocess.run(arguments, env={"PGPASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
        return [line.split("|") for line in done.stdout.splitlines() if line], done.stderr

    def rows(lines: list[list[str]], *kinds: type) -> list[tuple[object, ...]]:
        return [tuple(kind(v) if v else None for kind, v in zip(kinds, line)) for line in lines]

    cells: dict[str, object] = {"connect": rows(run("SELECT 1")[0], int)}
    cells["COUNT"] = rows(run(COUNT)[0], str, float)
    cells["AVG"] = rows(run(AVG)[0], str, float)
    cells["CUBE"] = rows(run(CUBE)[0], str, str, float)
    cells["parameterised"] = rows(run("PREPARE older (int) AS " + PARAMETERISED.format("$1"), "EXECUTE older (40)")[0], str, float)
    _, refused = run(REFUSED)
    cells["refused"] = "0A000" if "ERROR:  0A000:" in refused else refused
    cells["SHOW"] = rows(run("SHOW dpsql.budget")[0], float, float, float)
    budgets, _ = run("SHOW dpsql.budget", "SET dpsql.epsilon = 0.25", "SELECT COUNT(*) FROM adult WHERE age > 35", "SHOW dpsql.budget")
    cells["SET"] = float(budgets[0][0]) - float(budgets[-1][0])
    return cells


@pytest.mark.parametrize("client", ["psycopg3", "psycopg2", "asyncpg", "pg8000", "psql"])
def test_client_matrix(server: Server, frame: pd.DataFrame, client: str) -> None:
    host, port = server.address  # type: ignore[misc]
    cells_of = {"psycopg3": psycopg3_cells, "psycopg2": psycopg2_cells, "asyncpg": asyncpg_cells, "pg8000": pg8000_cells, "psql": psql_cells}
    with dpsql.testing.noise_disabled():
        cells = cells_of[client](host, port)
    check(cells, frame)


# -- clients in an environment of their own (opt-in) ------------------------------------------------------
NODE_SCRIPT = r"""
const { Client } = require('pg');
(async () => {
  const c = new Client({ host: process.argv[2], port: +process.argv[3], user: process.argv[4], password: process.argv[5], database: 'dpsql' });
  await c.connect();
  const rows = async (sql, p) => (await c.query({ text: sql, values: p, rowMode: 'array' })).rows;
  const out = {};
  out.connect = await rows('SELECT 1');
  for (const [name, sql] of JSON.parse(process.argv[6])) out[name] = await rows(sql);
  out.parameterised = await rows(process.argv[7], ['40']);  // node-postgres sends values as untyped text
  try { await rows(process.argv[8]); out.refused = 'released'; } catch (e) { out.refused = e.code; }
  out.SHOW = await rows('SHOW dpsql.budget');
  const before = out.SHOW[0][0];
  await c.query('SET dpsql.epsilon = 0.25');
  await rows('SELECT COUNT(*) FROM adult WHERE age > $1', ['36']);
  out.SET = before - (await rows('SHOW dpsql.budget'))[0][0];
  await c.query('RESET dpsql.epsilon');
  console.log(JSON.stringify(out));
  await c.end();
})().catch(e => { console.error(e); process.exit(1); });
"""


def node_cells(host: str, port: int, tmp_path: Path) -> dict[str, object]:
    modules = os.environ.get("DPSQL_NODE_MODULES")
    if not modules or not (Path(modules) / "pg").is_dir() or shutil.which("node") is None:
        pytest.skip(reason="node-postgres: set DPSQL_NODE_MODULES to a node_modules with pg (benchmarks/clients/README.md)")
    script = tmp_path / "client.js"
    script.write_text(NODE_SCRIPT)
    queries = json.dumps([["COUNT", COUNT], ["AVG", AVG], ["CUBE", CUBE]])
    done = subprocess.run(
        ["node", str(script), host, str(port), USER, PASSWORD, queries, PARAMETERISED.format("$1"), REFUSED],
        env={**os.environ, "NODE_PATH": modules}, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    cells = json.loads(done.stdout)
    for name in ("COUNT", "AVG", "CUBE", "parameterised"):  # float8 arrives as a JavaScript number, keys as text
        cells[name] = [tuple(row) for row in cells[name]]
    return cells


JDBC_SOURCE = r"""
import java.sql.*;
import java.util.*;
public class Matrix {
  static String rows(Connection c, String sql, Integer p) throws SQLException {
    try (PreparedStatement s = c.prepareStatement(sql)) {
      if (p != null) s.setInt(1, p);
      try (ResultSet r = s.executeQuery()) {
        StringBuilder out = new StringBuilder("[");
        int n = r.getMetaData().getColumnCount();
        while (r.next()) {
          if (out.length() > 1) out.append(",");
          out.append("[");
          for (int i = 1; i <= n; i++) {
            if (i > 1) out.append(",");
            Object v = r.getObject(i);
            out.append(v == null ? "null" : (v instanceof Number ? v.toString() : "\"" + v + "\""));
          }
          out.append("]");
        }
        return out.append("]").toString();
      }
    }
  }
  public static void main(String[] a) throws Exception {
    Properties props = new Properties(); props.setProperty("user", a[1]); props.setProperty("password", a[2]);
    try (Connection c = DriverManager.getConnection(a[0], props)) {
      DatabaseMetaData m = c.getMetaData();
      List<String> tables = new ArrayList<>(), columns = new ArrayList<>();
      try (ResultSet r = m.getTables(null, null, "%", new String[]{"TABLE"})) { while (r.next()) tables.add(r.getString("TABLE_NAME")); }
      try (ResultSet r = m.getColumns(null, "public", "adult", "%")) { while (r.next()) columns.add(r.getString("COLUMN_NAME") + ":" + r.getString("TYPE_NAME")); }
      StringBuilder o = new StringBuilder("{");
      o.append("\"tables\":\"").append(String.join(",", tables)).append("\",\"columns\":\"").append(String.join(",", columns)).append("\"");
      o.append(",\"connect\":").append(rows(c, "SELECT 1", null));
      o.append(",\"COUNT\":").append(rows(c, a[3], null)).append(",\"AVG\":").append(rows(c, a[4], null)).append(",\"CUBE\":").append(rows(c, a[5], null));
      o.append(",\"parameterised\":").append(rows(c, a[6], 40));
      try { rows(c, a[7], null); o.append(",\"refused\":\"released\""); } catch (SQLException e) { o.append(",\"refused\":\"").append(e.getSQLState()).append("\""); }
      String show = rows(c, "SHOW dpsql.budget", null);
      o.append(",\"SHOW\":").append(show);
      try (Statement s = c.createStatement()) { s.execute("SET dpsql.epsilon = 0.25"); }
      rows(c, "SELECT COUNT(*) FROM adult WHERE age > ?", 37);
      o.append(",\"after\":").append(rows(c, "SHOW dpsql.budget", null)).append("}");
      System.out.println(o);
    }
  }
}
"""
JDBC_JARS = ("/usr/share/java/postgresql.jar",)


def jdbc_cells(host: str, port: int, tmp_path: Path) -> dict[str, object]:
    jar = os.environ.get("DPSQL_PGJDBC_JAR") or next((j for j in JDBC_JARS if Path(j).is_file()), None)
    if jar is None or shutil.which("javac") is None:
        pytest.skip(reason="pgjdbc: apt-get install libpostgresql-jdbc-java (or set DPSQL_PGJDBC_JAR) and a JDK")
    (tmp_path / "Matrix.java").write_text(JDBC_SOURCE)
    subprocess.run(["javac", "-cp", jar, "Matrix.java"], cwd=tmp_path, check=True, capture_output=True, timeout=120)
    done = subprocess.run(
        ["java", "-cp", f"{tmp_path}{os.pathsep}{jar}", "Matrix", f"jdbc:postgresql://{host}:{port}/dpsql", USER, PASSWORD,
         COUNT, AVG, CUBE, PARAMETERISED.format("?"), REFUSED],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    cells = json.loads(done.stdout)
    assert cells.pop("tables") == "adult"  # DatabaseMetaData.getTables / getColumns: what DBeaver-style trees list
    assert cells.pop("columns").split(",")[:3] == ["person_id:int8", "sex:text", "race:int8"]
    cells["SET"] = cells["SHOW"][0][0] - cells.pop("after")[0][0]
    return {k: [tuple(r) for r in v] if k in ("COUNT", "AVG", "CUBE", "parameterised") else v for k, v in cells.items()}


SQLALCHEMY14 = textwrap.dedent("""
    import json, sys
    import sqlalchemy
    assert sqlalchemy.__version__.startswith("1.4"), sqlalchemy.__version__
    engine = sqlalchemy.create_engine(sys.argv[1])
    inspector = sqlalchemy.inspect(engine)
    columns = [(c["name"], str(c["type"]), c["nullable"], c.get("comment")) for c in inspector.get_columns("adult")]
    with engine.connect() as connection:
        rows = [list(r) for r in connection.execute(sqlalchemy.text(sys.argv[2]), {"age": 40})]
    print(json.dumps({"tables": inspector.get_table_names(), "columns": columns, "parameterised": rows}))
""")



# Superset reformats each statement with sqlglot before it sends it, which keeps a comment after a SELECT item
# but drops one that opens a subquery: a SQL dataset's cost comment goes after an item
SUPERSET_DATASET = "SELECT sex, COUNT(*) AS n /* dpsql: epsilon=0.25 */ FROM adult GROUP BY sex"
SUPERSET = textwrap.dedent("""
    import json, os, shutil, sys
    from importlib.metadata import version
    from pathlib import Path
    uri, virtual_sql, home = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    # a fresh copy of the metadata database setup.sh migrated (and gave an admin), so runs do not share state
    shutil.copy(Path(sys.prefix) / "superset-metadata.db", home / "superset.db")
    (home / "superset_config.py").write_text(f"SECRET_KEY = 'dpsql-client-matrix'\\nSQLALCHEMY_DATABASE_URI = 'sqlite:///{home}/superset.db'\\n")
    os.environ["SUPERSET_CONFIG_PATH"] = str(home / "superset_config.py")
    from superset.app import create_app
    app = create_app()
    with app.test_request_context():
        from superset.commands.chart.data.get_data_command import ChartDataCommand
        from superset.commands.database.create import CreateDatabaseCommand
        from superset.commands.database.test_connection import TestConnectionDatabaseCommand
        from superset.commands.dataset.create import CreateDatasetCommand
        from superset.common.query_context_factory import QueryContextFactory
        from superset.exceptions import SupersetErrorsException
        from superset.extensions import security_manager
        from superset.sql.parse import Table
        from superset.utils.core import override_user
        found = {"superset": version("apache-superset")}
        with override_user(security_manager.find_user("admin")):
            try:  # the connection form's "Test connection" button, then saving the database
                TestConnectionDatabaseCommand({"sqlalchemy_uri": uri.replace("matrix:", "nobody:")}).run()
            except SupersetErrorsException as error:
                found["wrong_password"] = [e.error_type.value for e in error.errors]
            TestConnectionDatabaseCommand({"sqlalchemy_uri": uri}).run()
            database = CreateDatabaseCommand({"database_name": "dpsql", "sqlalchemy_uri": uri}).run()
            found["tables"] = sorted(name for name, _, _ in database.get_all_table_names_in_schema(None, "public"))
            found["columns"] = [[c["column_name"], str(c["type"])] for c in database.get_columns(Table("adult", "public"))]
            # datasets as "+ Dataset" saves them: a table (its columns from the inspector) and a SQL query
            # (its columns from the cursor of the query run with a small LIMIT)
            physical = CreateDatasetCommand({"database": database.id, "schema": "public", "table_name": "adult"}).run()
            found["dataset_columns"] = [[c.column_name, c.type, c.is_dttm] for c in physical.columns]
            virtual = CreateDatasetCommand({"database": database.id, "schema": "public", "table_name": "by_sex", "sql": virtual_sql}).run()
            found["virtual_columns"] = [[c.column_name, c.type] for c in virtual.columns]
            found["filter_values"] = sorted(physical.values_for_column("sex", limit=10000))  # a dashboard filter's choices

            def chart(dataset, metric, filters=()):  # what /api/v1/chart/data runs for a bar chart by sex
                context = QueryContextFactory().create(
                    datasource={"id": dataset.id, "type": "table"},
                    queries=[{"columns": ["sex"], "metrics": [metric], "filters": list(filters), "row_limit": 1000, "orderby": [[metric, False]]}],
                    result_type="full", force=True,
                )
                command = ChartDataCommand(context)
                command.validate()
                query = command.run()["queries"][0]
                return {"sql": query["query"], "error": query.get("error"), "rows": [list(r.values()) for r in query["data"]]}

            found["COUNT"] = chart(physical, "count")
            found["AVG"] = chart(physical, {"expressionType": "SIMPLE", "column": {"column_name": "age"}, "aggregate": "AVG", "label": "AVG(age)"})
            found["filtered"] = chart(physical, "count", [{"col": "age", "op": ">", "val": 40}])
            found["virtual"] = chart(virtual, {"expressionType": "SIMPLE", "column": {"column_name": "n"}, "aggregate": "SUM", "label": "SUM(n)"})
        print(json.dumps(found))
""")

def test_node_postgres_matrix(server: Server, frame: pd.DataFrame, tmp_path: Path) -> None:
    host, port = server.address  # type: ignore[misc]
    with dpsql.testing.noise_disabled():
        cells = node_cells(host, port, tmp_path)
    check(cells, frame)


def test_pgjdbc_matrix_and_metadata(server: Server, frame: pd.DataFrame, tmp_path: Path) -> None:
    host, port = server.address  # type: ignore[misc]
    with dpsql.testing.noise_disabled():
        cells = jdbc_cells(host, port, tmp_path)
    check(cells, frame)


def test_sqlalchemy_14_inspector_lists_columns(server: Server, frame: pd.DataFrame) -> None:
    python = os.environ.get("DPSQL_SQLALCHEMY14_PYTHON")
    if not python:
        pytest.skip(reason="SQLAlchemy 1.4: set DPSQL_SQLALCHEMY14_PYTHON to a Python with SQLAlchemy 1.4 and psycopg2 (benchmarks/clients/README.md)")
    host, port = server.address  # type: ignore[misc]
    with dpsql.testing.noise_disabled():
        done = subprocess.run(
            [python, "-c", SQLALCHEMY14, f"postgresql+psycopg2://{USER}:{PASSWORD}@{host}:{port}/dpsql", PARAMETERISED.format(":age")],
            capture_output=True, text=True, timeout=120,
        )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["tables"] == ["adult"]
    assert [c[:3] for c in found["columns"]][:3] == [["person_id", "BIGINT", True], ["sex", "TEXT", True], ["race", "BIGINT", True]]
    assert found["columns"][1][3] == "declared domain: categories [F, M]"
    assert same([tuple(r) for r in found["parameterised"]], truth(frame)["parameterised"])


def test_superset_connection_test_datasets_and_charts(server: Server, frame: pd.DataFrame, tmp_path: Path) -> None:
    """Superset's own commands, as its UI calls them: the connection test, saving the database, a dataset
    of the table and one of a SQL query, a dashboard filter's values and the chart-data queries."""
    python = os.environ.get("DPSQL_SUPERSET_PYTHON")
    if not python:
        pytest.skip(reason="Superset: set DPSQL_SUPERSET_PYTHON to the Python of benchmarks/clients/setup.sh's Superset environment")
    host, port = server.address  # type: ignore[misc]
    with psycopg.connect(f"host={host} port={port} user={USER} password={PASSWORD} dbname=dpsql", autocommit=True) as connection, \
            dpsql.testing.noise_disabled():
        before = connection.execute("SHOW dpsql.budget").fetchone()[0]  # type: ignore[index]
        done = subprocess.run(
            [python, "-c", SUPERSET, f"postgresql+psycopg2://{USER}:{PASSWORD}@{host}:{port}/dpsql", SUPERSET_DATASET, str(tmp_path)],
            capture_output=True, text=True, timeout=300,
        )
        spent = before - connection.execute("SHOW dpsql.budget").fetchone()[0]  # type: ignore[index]
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["wrong_password"] == ["CONNECTION_INVALID_PASSWORD_ERROR"]  # Superset reads PostgreSQL's message
    assert found["tables"] == ["adult"]
    names_types = [["person_id", "BIGINT"], ["sex", "TEXT"], ["race", "BIGINT"], ["age", "BIGINT"], ["income", "BIGINT"], ["job", "TEXT"], ["browser", "TEXT"]]
    assert found["columns"] == names_types
    assert found["dataset_columns"] == [[name, kind, False] for name, kind in names_types]
    assert found["virtual_columns"] == [["sex", "STRING"], ["n", "FLOAT"]]
    assert found["filter_values"] == ["F", "M"]
    expected = truth(frame)
    expected["filtered"] = exact(frame, "SELECT sex, COUNT(*) FROM adult WHERE age > 40 GROUP BY sex")
    expected["virtual"] = expected["COUNT"]  # SUM(n) over the dataset's released counts
    for name in ("COUNT", "AVG", "filtered", "virtual"):
        assert found[name]["error"] is None, found[name]
        assert same([tuple(r) for r in found[name]["rows"]], expected[name]), (name, found[name], expected[name])
    assert "FROM public.adult" in found["COUNT"]["sql"] and "WHERE age > 40" in found["filtered"]["sql"]
    assert ") AS virtual_table GROUP BY sex" in found["virtual"]["sql"]
    # charged (each on a connection of its own, so nothing is answered from an earlier release): the three
    # charts on the table at the analyst's default_epsilon 0.5, the SQL dataset's column read and its chart
    # at its cost comment's 0.25; the connection test, the catalog and the filter's values (the declared
    # domain) are free
    assert math.isclose(spent, 3 * 0.5 + 2 * 0.25)


# -- what BI tools browse ---------------------------------------------------------------------------------
def test_sqlalchemy_inspector_lists_tables_columns_and_comments(server: Server) -> None:
    host, port = server.address  # type: ignore[misc]
    engine = sqlalchemy.create_engine(f"postgresql+psycopg://{USER}:{PASSWORD}@{host}:{port}/dpsql")
    try:
        inspector = sqlalchemy.inspect(engine)
        assert inspector.get_table_names() == ["adult"] and inspector.get_schema_names() == ["information_schema", "public"]
        columns = inspector.get_columns("adult")  # what Superset's dataset editor lists
        assert [(c["name"], str(c["type"]), c["nullable"]) for c in columns] == [
            ("person_id", "BIGINT", True), ("sex", "TEXT", True), ("race", "BIGINT", True), ("age", "BIGINT", True),
            ("income", "BIGINT", True), ("job", "TEXT", True), ("browser", "TEXT", True),
        ]
        comments = {c["name"]: c["comment"] for c in columns}
        assert comments["age"] == "declared domain: range [17, 90]; SUM/AVG clamp to [17, 90]"
        assert comments["job"] == "declared domain: categories [clerk, engineer, nurse, teacher]; NULL is a category"
        assert comments["browser"].startswith("no declared domain") and comments["person_id"].startswith("privacy unit")
        assert inspector.get_pk_constraint("adult")["constrained_columns"] == [] and inspector.get_foreign_keys("adult") == []
        assert "never rows" in inspector.get_table_comment("adult")["text"]
        assert sqlalchemy.Table("adult", sqlalchemy.MetaData(), autoload_with=engine).c.age.type.python_type is int
    finally:
        engine.dispose()


def test_start_up_statements_of_clients_are_answered(server: Server) -> None:
    host, port = server.address  # type: ignore[misc]
    with psycopg.connect(f"host={host} port={port} user={USER} password={PASSWORD} dbname=dpsql", autocommit=True) as connection:
        run = lambda sql: connection.execute(sql).fetchall()  # noqa: E731
        assert run("show time zone") == [("UTC",)]  # pgcli
        connection.execute("SET extra_float_digits = 3")  # pgjdbc
        assert run("SHOW extra_float_digits") == [("3",)]
        connection.execute("SET application_name = 'PostgreSQL JDBC Driver'")
        assert run("SELECT current_setting('application_name')") == [("PostgreSQL JDBC Driver",)]
        assert run("SELECT version()")[0][0].startswith("PostgreSQL 16.0 (dpsql serve")  # type: ignore[union-attr]
        assert "COUNT only" not in run("SELECT version()")[0][0] and "AVG" in run("SELECT version()")[0][0]  # type: ignore[operator]
        assert run("SELECT current_schema(), current_database(), current_user") == [("public", "dpsql", USER)]
        assert run("SELECT pg_catalog.pg_backend_pid() > 0") == [(True,)]
        assert run("SHOW TRANSACTION ISOLATION LEVEL") == [("read committed",)]
        plan = connection.execute("EXPLAIN SELECT sex, COUNT(*) FROM adult GROUP BY sex")  # as PostgreSQL's: one text column
        assert [c.name for c in plan.description] == ["QUERY PLAN"] and len(plan.fetchall()) > 3
        assert run("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'") == [("adult",)]
        with pytest.raises(psycopg.errors.UndefinedObject):  # 42704, as PostgreSQL
            run("SHOW no_such_setting")
        connection.execute("PREPARE q (int) AS SELECT COUNT(*) FROM adult WHERE age > $1")  # psql's PREPARE / EXECUTE
        assert len(run("EXECUTE q (50)")) == 1
        connection.execute("DEALLOCATE q")
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):  # 26000
            run("EXECUTE q (50)")


def test_startup_options_set_dpsql_settings(server: Server) -> None:
    """A BI tool that can only take a connection string: ``options=-c dpsql.errors=on``."""
    host, port = server.address  # type: ignore[misc]
    dsn = f"host={host} port={port} user={USER} password={PASSWORD} dbname=dpsql options='-c dpsql.errors=on -c dpsql.epsilon=0.125'"
    with psycopg.connect(dsn, autocommit=True) as connection:
        assert connection.execute("SHOW dpsql.errors").fetchone() == ("on",)
        assert connection.execute("SHOW dpsql.epsilon").fetchone() == ("0.125",)
    with pytest.raises(psycopg.OperationalError, match="dpsql.epsilon"):
        psycopg.connect(dsn.replace("0.125", "1e308"))


# -- parameters every driver sends --------------------------------------------------------------------------
def test_untyped_text_parameters_cast_exactly_or_are_refused(server: Server, frame: pd.DataFrame) -> None:
    host, port = server.address  # type: ignore[misc]
    with psycopg.connect(f"host={host} port={port} user={USER} password={PASSWORD} dbname=dpsql", autocommit=True) as connection, \
            dpsql.testing.noise_disabled():
        sql = "SELECT sex, COUNT(*) AS n FROM adult WHERE age > %s AND job = %s GROUP BY sex"
        rows = connection.execute(sql, ("40", "nurse")).fetchall()  # str: sent untyped (OID 0), as node-postgres does
        assert same(rows, exact(frame, "SELECT sex, COUNT(*) FROM adult WHERE age > 40 AND job = 'nurse' GROUP BY sex"))
        assert same(connection.execute(sql, ("40.0", "nurse")).fetchall(), rows)  # 40.0 is exactly 40
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):  # 22P02: 40.5 is no integer
            connection.execute(sql, ("40.5", "nurse"))
        cursor = connection.cursor()
        described = cursor.execute(sql, ("50", "clerk"), prepare=True)  # a named statement, Described before its Binds
        assert [c.name for c in described.description] == ["sex", "n"]


def test_describe_before_bind_reports_parameter_types_and_columns(server: Server) -> None:
    import asyncpg

    host, port = server.address  # type: ignore[misc]

    async def main() -> tuple[list[str], list[tuple[str, str]]]:
        connection = await asyncpg.connect(host=host, port=port, user=USER, password=PASSWORD, database="dpsql")
        try:
            statement = await connection.prepare(
                "SELECT sex, race, AVG(income) AS a FROM adult WHERE age BETWEEN $1 AND $2 AND job = $3 GROUP BY sex, race LIMIT $4"
            )
            return [t.name for t in statement.get_parameters()], [(a.name, a.type.name) for a in statement.get_attributes()]
        finally:
            await connection.close()

    parameters, attributes = asyncio.run(main())
    assert parameters == ["int8", "int8", "text", "int8"]
    assert attributes == [("sex", "text"), ("race", "int8"), ("a", "float8")]


def test_group_by_a_column_without_domain_and_having_work_over_the_wire(server: Server) -> None:
    """Both failed with XX000 when Describe ran the statement on an empty replica of the tables."""
    host, port = server.address  # type: ignore[misc]
    with psycopg.connect(f"host={host} port={port} user={USER} password={PASSWORD} dbname=dpsql", autocommit=True) as connection:
        for _ in range(12):
            rows = connection.execute("SELECT job, MAX(age) AS oldest FROM adult GROUP BY job HAVING MAX(age) > 0").fetchall()
            assert all(isinstance(r[1], (int, float)) for r in rows)
        keys = connection.execute("/* dpsql: epsilon=1 */ SELECT browser, COUNT(*) AS n FROM adult GROUP BY browser").fetchall()
        assert {k for k, _ in keys} <= {"firefox", "chrome", "safari"}


# -- error bars over the wire ----------------------------------------------------------------------------------
def test_errors_setting_adds_stderr_columns(server: Server, frame: pd.DataFrame) -> None:
    host, port = server.address  # type: ignore[misc]
    with psycopg.connect(f"host={host} port={port} user={USER} password={PASSWORD} dbname=dpsql", autocommit=True) as connection:
        connection.execute("SET dpsql.errors = on")
        cursor = connection.execute("/* dpsql: epsilon=0.5 */ SELECT sex, COUNT(*) AS n, AVG(age) AS a FROM adult WHERE age > 20 GROUP BY sex")
        assert [(c.name, c.type_code) for c in cursor.description] == [("sex", 25), ("n", 701), ("n_stderr", 701), ("a", 701), ("a_stderr", 701)]
        rows = cursor.fetchall()
        # a count at epsilon 0.5 (the statement's two aggregates share it) has a standard error of a few units, never 0
        assert all(1.0 < row[2] < 100.0 and row[4] > 0 for row in rows)
        off = connection.execute("/* dpsql: epsilon=0.5, errors=off */ SELECT sex, COUNT(*) AS n FROM adult WHERE age > 21 GROUP BY sex")
        assert [c.name for c in off.description] == ["sex", "n"]
