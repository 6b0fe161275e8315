"""A TIMESTAMP column declared ``range: [day, day]``: one ordered cell per day, each value counted in its day.

Noise-free answers equal DuckDB's exact answers over the rows the domain keeps (a value's day inside the range,
or NULL in a nullable column), on a pandas frame and on a DuckDB table: WHERE comparisons with midnights, GROUP BY
the day and date parts (keys of DuckDB's values and Python types), quantiles released as the midnight that starts
the day. Comparisons that split a day, GROUP BY the timestamps themselves, parts finer than a day, interpolated
quantiles and TIMESTAMPTZ are refused before anything is read, with nothing charged.
"""

from __future__ import annotations

import datetime

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
from recording_backend import RecordingBackend

DAYS = ["2024-01-01", "2024-12-31"]
SCHEMA = {"privacy_unit": "user_id", "max_rows_per_unit": 20, "columns": {"ts": {"range": DAYS, "nullable": True}, "kind": {"categories": ["a", "b"]}}}
INSIDE = "(CAST(ts AS DATE) BETWEEN DATE '2024-01-01' AND DATE '2024-12-31' OR ts IS NULL)"  # the rows the domain keeps


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """Instants over the year and two days beyond it on each side (dropped), NULLs, the first and last instants of
    the range's days; at most 20 rows per unit (no row is lost to bounding)."""
    rng = np.random.default_rng(5)
    n = 1500
    seconds = rng.integers(-2 * 86400, 368 * 86400, size=n).astype("timedelta64[s]")
    stamps = (np.datetime64("2024-01-01T00:00:00") + seconds).astype("datetime64[us]")
    edges = ["2024-01-01T00:00:00", "2024-12-31T23:59:59.999999", "2023-12-31T23:59:59.999999", "2025-01-01T00:00:00", "2024-06-01T00:00:00"]
    stamps[: len(edges)] = np.array(edges, dtype="datetime64[us]")
    data = pd.DataFrame({"user_id": np.arange(n) % 100, "ts": stamps, "kind": rng.choice(["a", "b"], size=n)})
    data.loc[len(edges) : len(edges) + 30, "ts"] = pd.NaT
    return data


@pytest.fixture(scope="module")
def reference(frame: pd.DataFrame) -> duckdb.DuckDBPyConnection:
    """DuckDB over the rows dpsql counts."""
    database = duckdb.connect()
    database.register("raw", frame)
    database.execute(f"CREATE VIEW events AS SELECT * FROM raw WHERE {INSIDE}")
    return database


def _registered(source: str, frame: pd.DataFrame) -> dpsql.Connection:
    """The events registered from a pandas frame, or from a table of a DuckDB database (TIMESTAMP columns both)."""
    if source == "pandas":
        connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
        connection.register("events", frame, schema=SCHEMA)
    else:
        database = duckdb.connect()
        database.register("frame", frame)
        database.execute("CREATE TABLE events AS SELECT * FROM frame")
        connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6))
        connection.register("events", None, schema=SCHEMA)
    assert connection._session.table("events").column_types["ts"].is_timestamp
    return connection


@pytest.fixture(scope="module", params=["pandas", "duckdb table"])
def events(request: pytest.FixtureRequest, frame: pd.DataFrame) -> dpsql.Connection:
    return _registered(request.param, frame)


@pytest.fixture(scope="module")
def frame_events(frame: pd.DataFrame) -> dpsql.Connection:
    """The pandas source only (the shapes that read the column the same way from either source)."""
    return _registered("pandas", frame)


def released(connection: dpsql.Connection, sql: str) -> list[tuple[object, ...]]:
    with dpsql.testing.noise_disabled():
        return connection.cursor().execute(sql, epsilon=1.0).fetchall()


def assert_equal_to_duckdb(connection: dpsql.Connection, reference: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[object, ...]]:
    """The released rows are DuckDB's: the same keys of the same Python types, counts within float rounding (the
    domain's empty cells are released as zeros)."""
    mine = released(connection, sql)
    theirs = {tuple(row[:-1]): row[-1] for row in reference.execute(sql).fetchall()}
    assert set(theirs) <= {tuple(row[:-1]) for row in mine}, sql
    for row in mine:
        assert row[-1] == pytest.approx(theirs.get(tuple(row[:-1]), 0), rel=1e-6, abs=1e-6), (sql, row)
        key = tuple(row[:-1])
        if key in theirs:  # the key's types are DuckDB's (a DATE a date, date_trunc a datetime)
            match = next(k for k in theirs if k == key)
            assert [type(v) for v in key] == [type(v) for v in match], (sql, key, match)
    return mine


@pytest.mark.parametrize(
    "condition",
    [
        "ts >= '2024-06-01'",
        "ts < DATE '2024-07-01'",
        "ts >= TIMESTAMP '2024-06-01 00:00:00'",
        "ts >= '2024-03-01' AND ts < '2024-04-01'",
        "ts < '2024-02-01' OR ts >= TIMESTAMP '2024-12-01 00:00:00'",
        "NOT ts < '2024-06-01'",
        "ts IS NULL",
        "ts IS NOT NULL AND kind = 'a'",
        "ts < '2024-03-01' OR kind = 'b'",  # couples two columns: the mask over their joint cells
        "ts > '2023-06-01 13:00' AND ts < '2025-03-01 12:30'",  # instants inside days outside the range split none of its days
    ],
)
def test_where_at_midnights_equals_duckdb(events: dpsql.Connection, reference: duckdb.DuckDBPyConnection, condition: str) -> None:
    for sql in (f"SELECT COUNT(*) FROM events WHERE {condition}", f"SELECT kind, COUNT(*), COUNT(ts) FROM events WHERE {condition} GROUP BY kind"):
        if "COUNT(ts)" in sql:
            mine = released(events, sql)
            theirs = {row[0]: row[1:] for row in reference.execute(sql).fetchall()}
            for kind, *counts in mine:
                assert counts == pytest.approx(list(theirs.get(kind, (0, 0))), rel=1e-6, abs=1e-6), (sql, kind)
        else:
            assert_equal_to_duckdb(events, reference, sql)


GROUPS = [
    "CAST(ts AS DATE)", "ts::DATE", "DATE(ts)", "date_trunc('day', ts)", "date_trunc('week', ts)", "date_trunc('month', ts)",
    "date_trunc('quarter', ts)", "date_trunc('year', ts)", "extract(year FROM ts)", "extract(month FROM ts)", "extract(dow FROM ts)",
    "extract(isodow FROM ts)", "extract(doy FROM ts)", "extract(week FROM ts)", "date_part('quarter', ts)", "year(ts)", "month(ts)",
    "day(ts)", "dayofweek(ts)",
]  # fmt: skip


@pytest.mark.parametrize("group", GROUPS)
def test_group_by_the_day_and_date_parts_equals_duckdb(frame_events: dpsql.Connection, reference: duckdb.DuckDBPyConnection, group: str) -> None:
    rows = assert_equal_to_duckdb(frame_events, reference, f"SELECT {group} AS g, COUNT(*) FROM events WHERE ts >= '2024-02-01' GROUP BY g")
    assert all(row[0] is not None for row in rows)  # NULL fails the WHERE (UNKNOWN): its cell is excluded, not shown


def test_a_day_key_shows_in_a_rollup_and_its_types_describe_the_result(events: dpsql.Connection, reference: duckdb.DuckDBPyConnection) -> None:
    sql = "SELECT kind, date_trunc('month', ts) AS m, COUNT(*) FROM events GROUP BY ROLLUP (kind, m)"
    order = lambda row: tuple((value is None, str(value)) for value in row)  # noqa: E731 - a NULL month and a rolled-up one: by count
    mine, theirs = sorted(released(events, sql), key=order), sorted(reference.execute(sql).fetchall(), key=order)
    assert len(mine) == len(theirs) == 2 * 13 + 2 + 1  # 12 months and the NULL cell per kind, each kind's total, the grand total
    for ours, exact in zip(mine, theirs):
        assert ours[:2] == exact[:2] and [type(v) for v in ours[:2]] == [type(v) for v in exact[:2]]
        assert ours[2] == pytest.approx(exact[2], rel=1e-6)
    cursor = events.cursor()
    with dpsql.testing.noise_disabled():
        cursor.execute("SELECT CAST(ts AS DATE) AS d, COUNT(*) FROM events GROUP BY d", epsilon=1.0)
    assert cursor.description[0][1] == dpsql.DATETIME
    assert len(cursor.fetchall()) == 367  # each day of the leap year and the NULL cell


def test_quantiles_are_the_midnight_that_starts_the_day(events: dpsql.Connection, reference: duckdb.DuckDBPyConnection) -> None:
    """MIN, MAX and the DISC quantiles answer to the day: the midnight that starts the day DuckDB's answer falls on."""
    sql = "SELECT kind, MIN(ts), MAX(ts), QUANTILE_DISC(ts, 0.5), PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY ts) FROM events GROUP BY kind"
    mine = {row[0]: row[1:] for row in released(events, sql)}
    for kind, *exact in reference.execute(sql).fetchall():
        assert list(mine[kind]) == [datetime.datetime.combine(value.date(), datetime.time()) for value in exact]
        assert all(type(value) is datetime.datetime for value in mine[kind])


REFUSED = {
    "SELECT COUNT(*) FROM events WHERE ts < '2024-06-01 12:00'": "splits the day 2024-06-01 .* ts < '2024-06-02' to count the day",
    "SELECT COUNT(*) FROM events WHERE ts BETWEEN '2024-01-01' AND '2024-01-31'": "splits the day 2024-01-31 .* ts < '2024-02-01'",
    "SELECT COUNT(*) FROM events WHERE ts > '2024-06-30'": "splits the day 2024-06-30 .* ts >= '2024-07-01' to leave it out",
    "SELECT COUNT(*) FROM events WHERE ts <= TIMESTAMP '2024-06-30 00:00:00'": "splits the day 2024-06-30",
    "SELECT COUNT(*) FROM events WHERE ts = DATE '2024-06-01'": "select whole days by midnights, e.g. ts >= '2024-06-01' AND ts < '2024-06-02'",
    "SELECT COUNT(*) FROM events WHERE ts IN ('2024-06-01', '2024-06-02')": "=, <> and IN select single instants",
    "SELECT CASE WHEN ts < '2024-06-01 08:00' THEN 1 ELSE 0 END AS early, COUNT(*) FROM events GROUP BY early": "splits the day 2024-06-01",
    "SELECT ts, COUNT(*) FROM events GROUP BY ts": r"values are instants, not days; group by the day, CAST\(ts AS DATE\)",
    "SELECT kind, ts, COUNT(*) FROM events GROUP BY CUBE (kind, ts)": r"CAST\(ts AS DATE\)",
    "SELECT extract(hour FROM ts) AS h, COUNT(*) FROM events GROUP BY h": "date part 'hour' is finer than a day",
    "SELECT date_trunc('hour', ts) AS h, COUNT(*) FROM events GROUP BY h": "date part 'hour' is finer than a day",
    "SELECT minute(ts) AS h, COUNT(*) FROM events GROUP BY h": "date part 'minute' is finer than a day",
    "SELECT MEDIAN(ts) FROM events": "interpolating between dates is not supported; .* the first instant of a day",
    "SELECT AVG(ts) FROM events": "holds days, which have no sum or average here; ask for MIN, MAX or QUANTILE_DISC",
    "SELECT COUNT(*) FROM events WHERE ts >= TIMESTAMP '2024-06-01 00:00:00+02'": "time zone offset",
    "SELECT COUNT(*) FROM events WHERE ts >= TIMESTAMPTZ '2024-06-01'": r"DATE '…' or TIMESTAMP '…' \(without time zone\)",
}


@pytest.mark.parametrize("sql", list(REFUSED))
def test_refusals_come_before_the_read_and_charge_nothing(frame: pd.DataFrame, sql: str) -> None:
    recording = RecordingBackend(duckdb.connect())
    connection = dpsql.connect(recording, budget=dpsql.Budget(epsilon=10.0))
    connection.register("events", frame, schema=SCHEMA)
    with pytest.raises(dpsql.NotSupportedError, match=REFUSED[sql]) as refused:
        connection.cursor().execute(sql, epsilon=1.0)
    assert "\n" not in str(refused.value)
    assert recording.statements == [] and connection.budget_history() == []


def test_a_timestamp_with_a_time_zone_is_refused_at_register(frame: pd.DataFrame) -> None:
    database = duckdb.connect()
    database.register("frame", frame)
    database.execute("CREATE TABLE events AS SELECT user_id, CAST(ts AS TIMESTAMPTZ) AS ts, kind FROM frame")
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1.0))
    with pytest.raises(dpsql.ProgrammingError, match="depends on the session's time zone.*AT TIME ZONE 'UTC'"):
        connection.register("events", None, schema=SCHEMA)
    assert connection.tables() == {}


def test_date_and_timestamp_literals_on_a_date_column(reference: duckdb.DuckDBPyConnection, frame: pd.DataFrame) -> None:
    """Typed literals compare with a DATE column too; a TIMESTAMP literal inside a day is refused there."""
    days = frame.assign(day=frame.ts.dt.date)
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    connection.register("events", days, schema={**SCHEMA, "columns": {"day": {"range": DAYS, "nullable": True}}})
    database = duckdb.connect()
    database.register("raw", days)
    database.execute("CREATE VIEW events AS SELECT * FROM raw WHERE day BETWEEN DATE '2024-01-01' AND DATE '2024-12-31' OR day IS NULL")
    for condition in ("day >= DATE '2024-06-01'", "day < TIMESTAMP '2024-07-01 00:00:00'", "day BETWEEN DATE '2024-02-01' AND '2024-02-29'"):
        assert_equal_to_duckdb(connection, database, f"SELECT COUNT(*) FROM events WHERE {condition}")
    with pytest.raises(dpsql.DataError, match="does not match the domain of 'day'"):
        connection.cursor().execute("SELECT COUNT(*) FROM events WHERE day < TIMESTAMP '2024-07-01 12:00:00'", epsilon=1.0)


def test_a_wide_range_of_days_filters_by_runs_of_day_numbers() -> None:
    """A range of two centuries of days: a WHERE on it reaches the engine as a BETWEEN of day numbers, not a list of
    tens of thousands of them."""
    recording = RecordingBackend(duckdb.connect())
    recording.connection.execute("CREATE TABLE events AS SELECT i AS user_id, TIMESTAMP '1900-01-01 06:00' + INTERVAL (i * 3) DAY AS ts FROM range(20000) t(i)")
    connection = dpsql.connect(recording, budget=dpsql.Budget(epsilon=1e6))
    connection.register("events", None, schema={"privacy_unit": None, "columns": {"ts": {"range": ["1900-01-01", "2099-12-31"]}}})
    with dpsql.testing.noise_disabled():
        (count,) = connection.cursor().execute("SELECT COUNT(*) FROM events WHERE ts >= '1950-01-01' AND ts < '2050-01-01'", epsilon=1.0).fetchone()
    exact = recording.connection.execute("SELECT COUNT(*) FROM events WHERE ts >= '1950-01-01' AND ts < '2050-01-01'").fetchone()[0]
    assert count == pytest.approx(exact, abs=1e-6)
    sql = recording.statements[-1].upper()
    assert sql.count("C0 BETWEEN") == 1 and len(sql) < 2000  # the mask is one run of day numbers


def test_postgresql_answers_like_duckdb(frame: pd.DataFrame, reference: duckdb.DuckDBPyConnection) -> None:
    """The same statements on a PostgreSQL ``timestamp`` column (its day by a cast, its day number transpiled)."""
    import os
    import urllib.parse

    import psycopg

    import engines

    dsn = engines.postgres_dsn()
    schema = f"dpsql_days_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        admin.execute(f"CREATE TABLE {schema}.events (user_id bigint, ts timestamp, kind text)")
        with admin.cursor().copy(f"COPY {schema}.events FROM STDIN") as copy:
            for user, stamp, kind in frame.itertuples(index=False):
                copy.write_row((int(user), None if pd.isna(stamp) else stamp.to_pydatetime(), kind))
        admin.execute(f"INSERT INTO {schema}.events VALUES (0, 'infinity', 'a'), (1, '-infinity', 'b')")  # outside every range
    try:
        separator = "&" if "?" in dsn else "?"
        connection = dpsql.connect(backend=f"{dsn}{separator}options={urllib.parse.quote(f'-csearch_path={schema}')}", budget=dpsql.Budget(epsilon=1e6))
        connection.register("events", schema=SCHEMA)
        for sql in (
            "SELECT kind, date_trunc('month', ts) AS m, COUNT(*) FROM events WHERE ts >= '2024-03-01' AND ts < DATE '2024-10-01' GROUP BY kind, m",
            "SELECT CAST(ts AS DATE) AS d, COUNT(*) FROM events WHERE ts < '2024-01-08' OR ts IS NULL GROUP BY d",
            "SELECT extract(dow FROM ts) AS w, COUNT(*) FROM events GROUP BY w",
        ):
            assert_equal_to_duckdb(connection, reference, sql)
        connection.close()
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def test_a_batch_a_join_and_the_sqlalchemy_type(frame: pd.DataFrame, reference: duckdb.DuckDBPyConnection) -> None:
    """Statements with different WHERE clauses on the days share one batch (their masks in the workload); the column
    works through a join with a public table; the SQLAlchemy dialect reflects it as a DATETIME."""
    from sqlalchemy import types

    from dpsql.sqlalchemy import column_type

    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    connection.register("kinds", pd.DataFrame({"kind": ["a", "b"], "label": ["first", "second"]}), schema={"public": True})
    connection.register("events", frame, schema={**SCHEMA, "foreign_keys": {"kind": "kinds.kind"}})
    batch = ["SELECT COUNT(*) FROM events WHERE ts >= '2024-06-01'", "SELECT year(ts) AS y, COUNT(*) FROM events WHERE ts < '2024-03-01' GROUP BY y"]
    with dpsql.testing.noise_disabled():
        results = connection.workload(batch, epsilon=1.0)
    for sql, result in zip(batch, results):
        exact = reference.execute(sql).fetchall()
        assert [row[:-1] for row in result.rows] == [row[:-1] for row in exact]
        assert [row[-1] for row in result.rows] == pytest.approx([row[-1] for row in exact], rel=1e-6)
    joined = "SELECT k.label, date_trunc('quarter', e.ts) AS q, COUNT(*) FROM events e JOIN kinds k ON e.kind = k.kind WHERE e.ts >= '2024-04-01' GROUP BY k.label, q"
    reference.register("kinds", pd.DataFrame({"kind": ["a", "b"], "label": ["first", "second"]}))
    assert_equal_to_duckdb(connection, reference, joined)
    assert isinstance(column_type(connection._session.table("events").schema.column("ts"), "TIMESTAMP"), types.DateTime)
