"""``dpsql serve`` with real clients on loopback: psql, psycopg (simple and extended protocol),
pandas over psycopg, SQLAlchemy's postgresql+psycopg dialect; authentication, per-analyst budgets,
SQLSTATE errors, catalog answers, TLS. Exact answers are checked with the noise switched off in this
process (the server runs on a thread of it; the hook itself is out of reach of a client)."""

from __future__ import annotations

import math
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import psycopg
import pytest
import sqlalchemy

import dpsql.testing
from dpsql.serve import Server
from serve_helpers import ANALYSTS, GROUP_BUDGET, dsn, exact, psql_binary, running, write_config

SCHEMA_TEXT_COLUMNS = ["person_id", "sex", "race", "age", "income", "job", "browser"]


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    from conftest import make_adult

    return make_adult(persons=800, seed=11)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frame: pd.DataFrame, adult_schema: dict[str, object]) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("serve")
    with running(write_config(directory, frame, adult_schema)) as started:
        yield started


def remaining(server: Server, user: str) -> tuple[float, float, float]:
    with psycopg.connect(dsn(server, user), autocommit=True) as connection:
        return connection.execute("SHOW dpsql.budget").fetchone()  # type: ignore[return-value]


def close_rows(released: list[tuple[object, ...]], truth: list[tuple[object, ...]]) -> bool:
    """Same keys, counts equal up to floating rounding (the GLS answers of exact measurements)."""
    if len(released) != len(truth):
        return False
    key = lambda row: tuple((value is None, str(value)) for value in row[:-1])  # noqa: E731
    return all(
        a[:-1] == b[:-1] and math.isclose(float(a[-1]), float(b[-1]), abs_tol=1e-6)  # type: ignore[arg-type]
        for a, b in zip(sorted(released, key=key), sorted(truth, key=key))
    )


# -- psql ---------------------------------------------------------------------------------------------
def test_psql_session_cube_budget_and_describe(server: Server, frame: pd.DataFrame, tmp_path: Path) -> None:
    psql = psql_binary()
    if psql is None:
        pytest.skip(reason="psql is not installed (.ci/services.sh installs PostgreSQL)")
    before = remaining(server, "bob")
    script = tmp_path / "session.sql"
    script.write_text(
        "\\dt\n\\d adult\nSET dpsql.epsilon = 0.25;\n"
        "SELECT sex, race, COUNT(*) AS n FROM adult GROUP BY CUBE (sex, race);\n"
        "SHOW dpsql.budget;\n"
    )
    host, port = server.address  # type: ignore[misc]
    with dpsql.testing.noise_disabled():
        done = subprocess.run(
            [psql, "-X", "-A", "-t", "-F", "|", "-h", host, "-p", str(port), "-U", "bob", "-d", "dpsql", "-f", str(script)],
            env={"PGPASSWORD": ANALYSTS["bob"][0], "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60,
        )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "public|adult|table|bob"  # \dt
    described = [line.split("|")[:2] for line in lines[1:8]]  # \d adult: column, type
    assert described == [["person_id", "bigint"], ["sex", "text"], ["race", "bigint"], ["age", "bigint"],
                         ["income", "bigint"], ["job", "text"], ["browser", "text"]]
    assert lines[8] == "SET"
    cube = [line.split("|") for line in lines[9:-1]]
    released = [(s or None, int(r) if r else None, float(n)) for s, r, n in cube]
    truth = exact(frame, "SELECT sex, race, COUNT(*) FROM adult GROUP BY CUBE (sex, race)")
    assert close_rows(released, truth)  # 2 x 5 cells, 2 + 5 subtotals, the total
    epsilon, delta, rho = map(float, lines[-1].split("|"))
    assert math.isclose(epsilon, before[0] - 0.25, abs_tol=1e-9) and delta == 0.0


def test_psql_shows_explain_as_a_query_plan_of_short_lines(server: Server) -> None:
    """EXPLAIN over the wire is one text column, QUERY PLAN, as PostgreSQL's: psql printed a four-column
    table padded to its longest detail (a 470-character paragraph), every line wrapped on a terminal."""
    psql = psql_binary()
    if psql is None:
        pytest.skip(reason="psql is not installed (.ci/services.sh installs PostgreSQL)")
    host, port = server.address  # type: ignore[misc]
    before = remaining(server, "bob")
    done = subprocess.run(
        [psql, "-X", "-h", host, "-p", str(port), "-U", "bob", "-d", "dpsql", "-c", "EXPLAIN SELECT race, COUNT(*) FROM adult GROUP BY race"],
        env={"PGPASSWORD": ANALYSTS["bob"][0], "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.rstrip().splitlines()
    assert lines[0].strip() == "QUERY PLAN" and set(lines[1]) == {"-"}
    plan = [line.strip() for line in lines[2:-1]]
    assert plan[0] == "statement: 1 = 1 — SELECT race, COUNT(*) FROM adult GROUP BY race" and plan[-1].startswith("glossary: docs/glossary.md")
    assert any(line.startswith("error: ratio to lower bound = ") for line in plan) and lines[-1] == f"({len(plan)} rows)"
    assert max(len(line) for line in plan) < 170
    assert remaining(server, "bob") == before


def test_psql_wrong_password_is_refused_with_28P01(server: Server) -> None:
    psql = psql_binary()
    if psql is None:
        pytest.skip(reason="psql is not installed")
    host, port = server.address  # type: ignore[misc]
    done = subprocess.run(
        [psql, "-X", "-h", host, "-p", str(port), "-U", "alice", "-d", "dpsql", "-v", "VERBOSITY=verbose", "-c", "SELECT 1"],
        env={"PGPASSWORD": "wrong", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 2
    assert 'password authentication failed for user "alice"' in done.stderr


# -- psycopg --------------------------------------------------------------------------------------------
def test_psycopg_extended_protocol_parameters_prepared_and_binary(server: Server, frame: pd.DataFrame) -> None:
    sql = "SELECT sex, race, COUNT(*) AS n FROM adult WHERE age >= %s AND job = %s GROUP BY sex, race"
    truth_sql = "SELECT sex, race, COUNT(*) FROM adult WHERE age >= {} AND job = '{}' GROUP BY sex, race"
    with psycopg.connect(dsn(server, "alice")) as connection, dpsql.testing.noise_disabled():
        cursor = connection.cursor()
        cursor.execute(sql, (30, "nurse"))  # Parse/Bind/Describe/Execute with typed parameters
        assert [(c.name, c.type_code) for c in cursor.description] == [("sex", 25), ("race", 20), ("n", 701)]
        rows = cursor.fetchall()
        assert isinstance(rows[0][1], int) and isinstance(rows[0][2], float)
        full = exact(frame, truth_sql.format(30, "nurse"))
        # every cell of the declared domain is released, zeros included
        truth = [(s, r, float(dict(((a, b), n) for a, b, n in full).get((s, r), 0))) for s in ("F", "M") for r in range(5)]
        assert close_rows(rows, truth)
        for age, job in ((50, "clerk"), (20, "teacher")):  # a named prepared statement, bound again
            cursor.execute(sql, (age, job), prepare=True)
            full = exact(frame, truth_sql.format(age, job))
            got = {(s, r): n for s, r, n in cursor.fetchall()}
            assert all(math.isclose(got[(s, r)], n, abs_tol=1e-6) for s, r, n in full)
        binary = connection.cursor(binary=True)
        binary.execute("SELECT job, COUNT(*) AS n FROM adult GROUP BY job")
        truth = exact(frame, "SELECT job, COUNT(*) FROM adult GROUP BY job")
        assert close_rows(binary.fetchall(), truth)  # four jobs and the NULL cell
        connection.rollback()  # psycopg's DEALLOCATE of its prepared statements goes through too


def test_psycopg_refusals_carry_sqlstate_and_keep_the_connection(server: Server) -> None:
    cases = {
        "SELECT * FROM adult LIMIT 100": "0A000",  # a client's "preview the rows" probe
        "DROP TABLE adult": "0A000",
        "COPY adult TO STDOUT": "42601",  # dpsql's parser: not a SELECT (ProgrammingError)
        "SELEC sex FROM adult": "42601",
        "SELECT COUNT(*) FROM nothing": "42601",
        "SELECT COUNT(*) FROM adult WHERE sex = 'X'": "22000",
        "SELECT COUNT(*) FROM adult /* dpsql: epsilon=1000 */": "53Z01",
        "SELECT COUNT(*) FROM adult /* dpsql: epsilon=-1 */": "22023",
        "SET dpsql.epsilon = zero": "22023",
        "SET dpsql.noise = off": "42704",  # no setting reaches the engine's test hooks
    }
    before = remaining(server, "alice")
    with psycopg.connect(dsn(server, "alice"), autocommit=True) as connection:
        for sql, sqlstate in cases.items():
            with pytest.raises(psycopg.Error) as raised:
                connection.execute(sql)
            assert raised.value.sqlstate == sqlstate, (sql, raised.value)
            assert connection.execute("SHOW dpsql.epsilon").fetchone() == ("0.5",)  # still serving
    assert remaining(server, "alice") == before  # refused before any data was read: nothing charged


def test_budget_exhausted_is_a_dpsql_error_class(server: Server) -> None:
    with psycopg.connect(dsn(server, "alice"), autocommit=True) as connection:
        with pytest.raises(psycopg.errors.OperationalError) as raised:  # class 53: insufficient resources
            connection.execute("/* dpsql: epsilon=100 */ SELECT COUNT(*) FROM adult")
    assert raised.value.sqlstate == "53Z01"
    assert "would spend more than the budget has left" in str(raised.value)


def test_cost_from_comment_session_variable_and_default(server: Server) -> None:
    statement = "SELECT sex, COUNT(*) FROM adult WHERE age > {} GROUP BY sex"  # a WHERE: never answered from kept rows
    with psycopg.connect(dsn(server, "alice"), autocommit=True) as connection:
        def spent(sql: str) -> float:
            before = connection.execute("SHOW dpsql.budget").fetchone()[0]  # type: ignore[index]
            connection.execute(sql)
            return before - connection.execute("SHOW dpsql.budget").fetchone()[0]  # type: ignore[index]

        assert math.isclose(spent(statement.format(20)), 0.5)  # the analyst's default_epsilon
        connection.execute("SET dpsql.epsilon = 0.125")
        assert math.isclose(spent(statement.format(21)), 0.125)
        assert math.isclose(spent("/* dpsql: epsilon=0.0625 */ " + statement.format(22)), 0.0625)  # the comment wins
        connection.execute("RESET dpsql.epsilon")
        assert math.isclose(spent(statement.format(23)), 0.5)
        assert connection.execute("EXPLAIN " + statement.format(24)).fetchall()  # EXPLAIN reads and charges nothing
        assert math.isclose(spent("EXPLAIN " + statement.format(25)), 0.0)


def test_analysts_do_not_spend_or_see_each_others_budgets(server: Server) -> None:
    alice, bob = remaining(server, "alice"), remaining(server, "bob")
    group = remaining(server, "dave")
    with psycopg.connect(dsn(server, "carol"), autocommit=True) as carol:
        carol.execute("/* dpsql: epsilon=0.5 */ SELECT COUNT(*) FROM adult WHERE age > 40")
    assert remaining(server, "alice") == alice and remaining(server, "bob") == bob
    after = remaining(server, "dave")  # carol and dave share the research group's ledger
    assert math.isclose(after[0], group[0] - 0.5)
    assert math.isclose(remaining(server, "carol")[0], after[0])
    ledgers = sorted(p.name for p in Path(server.config.ledgers).iterdir() if p.suffix == ".ledger")  # type: ignore[arg-type]
    assert ledgers == ["alice.ledger", "bob.ledger", "group-research.ledger"]
    with sqlite3.connect(Path(server.config.ledgers) / "group-research.ledger") as ledger:  # type: ignore[arg-type]
        assert ledger.execute("SELECT budget_epsilon FROM header").fetchone()[0] == GROUP_BUDGET["epsilon"]


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "anything"), ("bob", ANALYSTS["alice"][0])])
def test_wrong_credentials_are_refused(server: Server, user: str, password: str) -> None:
    with pytest.raises(psycopg.OperationalError, match=f'password authentication failed for user "{user}"'):
        psycopg.connect(dsn(server, "alice", password).replace("user=alice", f"user={user}"))


def test_catalog_answers_come_from_the_schema_and_cost_nothing(server: Server) -> None:
    before = remaining(server, "bob")
    with psycopg.connect(dsn(server, "bob"), autocommit=True) as connection:
        tables = connection.execute("SELECT table_schema, table_name FROM information_schema.tables").fetchall()
        columns = connection.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'adult' ORDER BY ordinal_position"
        ).fetchall()
        assert connection.execute("SELECT current_schema()").fetchone() == ("public",)
        assert connection.execute("SELECT version()").fetchone()[0].startswith("PostgreSQL 16.0 (dpsql serve")  # type: ignore[index]
        assert connection.execute("SHOW server_version").fetchone() == ("16.0 (dpsql)",)
        assert connection.execute("SELECT 1").fetchone() == (1,)  # a pool's liveness probe
    assert tables == [("public", "adult")]
    assert [name for name, _ in columns] == SCHEMA_TEXT_COLUMNS
    assert remaining(server, "bob") == before


# -- pandas and SQLAlchemy ----------------------------------------------------------------------------------
def test_pandas_read_sql_over_psycopg(server: Server, frame: pd.DataFrame) -> None:
    with psycopg.connect(dsn(server, "alice")) as connection, dpsql.testing.noise_disabled(), pytest.warns(UserWarning):
        released = pd.read_sql("SELECT sex, job, COUNT(*) AS n FROM adult GROUP BY sex, job", connection)
    assert list(released.columns) == ["sex", "job", "n"] and released["n"].dtype == "float64"
    truth = exact(frame, "SELECT sex, job, COUNT(*) FROM adult GROUP BY sex, job")
    assert close_rows([tuple(None if pd.isna(v) else v for v in row) for row in released.itertuples(index=False)], truth)


def test_sqlalchemy_postgresql_psycopg_dialect(server: Server, frame: pd.DataFrame) -> None:
    host, port = server.address  # type: ignore[misc]
    engine = sqlalchemy.create_engine(f"postgresql+psycopg://carol:{ANALYSTS['carol'][0]}@{host}:{port}/dpsql")
    try:
        assert sqlalchemy.inspect(engine).get_table_names() == ["adult"]  # reflection through pg_catalog, with parameters
        query = sqlalchemy.text("SELECT race, COUNT(*) AS n FROM adult WHERE income < :cap GROUP BY race /* dpsql: epsilon=0.25 */")
        with engine.connect() as connection, dpsql.testing.noise_disabled():
            rows = connection.execute(query, {"cap": 50_000}).fetchall()
            released = pd.read_sql(query, connection, params={"cap": 50_000})
        truth = exact(frame, "SELECT race, COUNT(*) FROM adult WHERE income < 50000 GROUP BY race")
        assert close_rows([tuple(r) for r in rows], truth)
        assert close_rows(list(released.itertuples(index=False, name=None)), truth)
    finally:
        engine.dispose()


# -- backend errors, TLS ------------------------------------------------------------------------------------
def test_backend_error_text_never_reaches_the_client(tmp_path: Path, frame: pd.DataFrame, adult_schema: dict[str, object]) -> None:
    with running(write_config(tmp_path, frame, adult_schema)) as server:
        with psycopg.connect(dsn(server, "bob"), autocommit=True) as connection:
            # the table changes under the open session: reading it now fails with an error quoting a row value
            database = server._service.tables._server_db  # type: ignore[union-attr]
            database.execute("CREATE OR REPLACE TABLE adult AS SELECT * REPLACE ('secret-42' AS age) FROM adult")
            with pytest.raises(psycopg.Error) as raised:
                connection.execute("/* dpsql: epsilon=0.1 */ SELECT sex, COUNT(*) FROM adult GROUP BY sex")
            assert raised.value.sqlstate == "58000"
            assert "secret-42" not in str(raised.value) and "incident" in str(raised.value)
            assert connection.execute("SHOW dpsql.epsilon").fetchone() == ("",)  # the session goes on


def _self_signed(directory: Path) -> tuple[Path, Path]:
    certificate, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-keyout", str(key), "-out", str(certificate)],
        check=True, capture_output=True, timeout=60,
    )
    return certificate, key


def test_tls_is_required_when_configured(tmp_path: Path, frame: pd.DataFrame, adult_schema: dict[str, object]) -> None:
    if shutil.which("openssl") is None:
        pytest.skip(reason="openssl is needed to make a test certificate")
    _self_signed(tmp_path)
    config = write_config(tmp_path, frame, adult_schema, tls={"certificate": "server.crt", "key": "server.key"})
    with running(config) as server:
        with psycopg.connect(dsn(server, "bob", sslmode="require"), autocommit=True) as connection:
            assert connection.pgconn.ssl_in_use
            assert connection.execute("SHOW dpsql.budget").fetchone() == (3.0, 0.0, 0.0)
        with pytest.raises(psycopg.OperationalError, match="accepts TLS connections only"):
            psycopg.connect(dsn(server, "bob", sslmode="disable"))


def test_bi_statements_run_over_the_wire(server: Server, frame: pd.DataFrame) -> None:
    """What Superset and Metabase send — a chart's outer SELECT over a native query, a qualified table, the
    cost in a hint — runs as written: its shell post-processes the released rows, its core is charged once."""
    statement = (
        "/*+ dpsql: epsilon=0.25 */ SELECT race AS race, n AS n FROM (SELECT race, COUNT(*) AS n, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS pct "
        "FROM public.adult GROUP BY race HAVING race = 4 OR COUNT(*) > 50) AS virtual_table ORDER BY n DESC LIMIT 1000"
    )
    with psycopg.connect(dsn(server, "bob"), autocommit=True) as connection, dpsql.testing.noise_disabled():
        before = connection.execute("SHOW dpsql.budget").fetchone()[0]  # type: ignore[index]
        cursor = connection.execute(statement)
        assert [column.name for column in cursor.description] == ["race", "n"]
        rows = cursor.fetchall()
        spent = before - connection.execute("SHOW dpsql.budget").fetchone()[0]  # type: ignore[index]
    assert math.isclose(spent, 0.25)
    truth = exact(frame, "SELECT race, COUNT(*) AS n FROM adult GROUP BY race HAVING race = 4 OR COUNT(*) > 50 ORDER BY n DESC")
    assert [r[0] for r in rows] == [r[0] for r in truth] and all(math.isclose(a[1], b[1], abs_tol=1e-6) for a, b in zip(rows, truth))


def test_integer_keys_beyond_bigint_are_numeric_on_the_wire(tmp_path: Path, frame: pd.DataFrame, adult_schema: dict[str, object]) -> None:
    """HUGEINT and UBIGINT keys were described as int8: a binary client (asyncpg, JDBC) could not read
    2^127 - 1 in eight bytes. They are NUMERIC, whole numbers read back exactly, in text and binary."""
    import asyncio

    import asyncpg
    import duckdb
    import yaml

    huge = (1 << 127) - 1
    with duckdb.connect(str(tmp_path / "wide.duckdb")) as database:
        database.execute(f"CREATE TABLE wide AS SELECT i AS pid, CASE WHEN i % 2 = 0 THEN {huge}::HUGEINT ELSE 5::HUGEINT END AS k, "
                         "(i % 2)::UBIGINT + 18446744073709551614::UBIGINT AS u FROM range(600) r(i)")
    path = write_config(tmp_path, frame, adult_schema)
    config = yaml.safe_load(path.read_text())
    config["tables"]["wide"] = {"source": "wide.duckdb", "schema": {"privacy_unit": "pid", "max_rows_per_group": 1,
                                                                    "columns": {"k": {"categories": [5, huge]}}}}
    path.write_text(yaml.safe_dump(config))
    expected = {"k": [5, huge], "u": [18446744073709551614, 18446744073709551615]}
    with running(path) as server, dpsql.testing.noise_disabled():
        with psycopg.connect(dsn(server, "carol"), autocommit=True) as connection:  # a budget with δ: u's keys are selected
            for column, keys in expected.items():
                for binary in (False, True):
                    cursor = connection.cursor(binary=binary)
                    cursor.execute(f"/* dpsql: epsilon=0.5 */ SELECT {column}, COUNT(*) AS n FROM wide GROUP BY {column} ORDER BY {column}")
                    assert cursor.description[0].type_code == 1700  # numeric
                    assert [(key, round(n)) for key, n in cursor.fetchall()] == [(key, 300) for key in keys]
        host, port = server.address  # type: ignore[misc]

        async def fetch() -> list[object]:
            client = await asyncpg.connect(host=host, port=port, user="carol", password=ANALYSTS["carol"][0], database="dpsql")
            try:
                rows = await client.fetch("/* dpsql: epsilon=0.5 */ SELECT k, COUNT(*) AS n FROM wide GROUP BY k ORDER BY k")
            finally:
                await client.close()
            return [int(row["k"]) for row in rows]

        assert asyncio.run(fetch()) == expected["k"]


def test_a_timestamp_range_of_days_over_psql_and_psycopg(tmp_path: Path, frame: pd.DataFrame, adult_schema: dict[str, object]) -> None:
    """A TIMESTAMP column declared as a range of days, served: WHERE at midnights and GROUP BY its day and month answer
    DuckDB's counts, typed as DuckDB's (a date; date_trunc a timestamp) in psql's text and psycopg's binary format; a
    comparison that splits a day is refused with SQLSTATE 0A000 before anything is charged."""
    import duckdb
    import yaml

    events = pd.DataFrame({"user_id": range(600), "ts": pd.Timestamp("2024-01-01 09:30") + pd.to_timedelta([i * 13 % 366 for i in range(600)], unit="D")})
    events.to_parquet(tmp_path / "events.parquet")
    path = write_config(tmp_path, frame, adult_schema)
    config = yaml.safe_load(path.read_text())
    config["tables"]["events"] = {"source": "events.parquet", "schema": {"privacy_unit": "user_id", "columns": {"ts": {"range": ["2024-01-01", "2024-12-31"]}}}}
    path.write_text(yaml.safe_dump(config))
    by_month = "SELECT date_trunc('month', ts) AS m, COUNT(*) AS n FROM events WHERE ts >= '2024-03-01' AND ts < DATE '2024-06-01' GROUP BY m ORDER BY m"
    by_day = "SELECT CAST(ts AS DATE) AS d, COUNT(*) AS n FROM events WHERE ts < TIMESTAMP '2024-01-04 00:00:00' GROUP BY d ORDER BY d"
    reference = duckdb.connect()
    reference.register("events", events)
    months, days = reference.execute(by_month).fetchall(), reference.execute(by_day).fetchall()
    assert len(months) == 3 and len(days) == 3
    with running(path) as server, dpsql.testing.noise_disabled():
        with psycopg.connect(dsn(server, "bob"), autocommit=True) as connection:
            before = connection.execute("SHOW dpsql.budget").fetchone()
            cursor = connection.cursor(binary=True)
            cursor.execute(f"/* dpsql: epsilon=0.25 */ {by_month}")
            assert cursor.description[0].type_code == 1114  # timestamp
            assert [(m, round(n, 6)) for m, n in cursor.fetchall()] == [(m, float(n)) for m, n in months]
            cursor.execute(f"/* dpsql: epsilon=0.25 */ {by_day}")
            assert cursor.description[0].type_code == 1082  # date
            assert [(d, round(n, 6)) for d, n in cursor.fetchall()] == [(d, float(n)) for d, n in days]
            spent = connection.execute("SHOW dpsql.budget").fetchone()
            with pytest.raises(psycopg.errors.FeatureNotSupported, match="splits the day 2024-06-01"):
                connection.execute("SELECT COUNT(*) FROM events WHERE ts < '2024-06-01 12:00'")
            assert connection.execute("SHOW dpsql.budget").fetchone() == spent and math.isclose(before[0] - spent[0], 0.5)  # type: ignore[index]
        psql = psql_binary()
        if psql is not None:
            host, port = server.address  # type: ignore[misc]
            done = subprocess.run(
                [psql, "-X", "-A", "-t", "-F", "|", "-h", host, "-p", str(port), "-U", "bob", "-d", "dpsql", "-c", f"/* dpsql: epsilon=0.25 */ {by_day}"],
                env={"PGPASSWORD": ANALYSTS["bob"][0], "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60,
            )
            assert done.returncode == 0 and done.stderr == "", done.stderr
            assert [line.split("|") for line in done.stdout.strip().splitlines()] == [[str(d), str(float(n))] for d, n in days]
