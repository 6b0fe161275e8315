"""Shared pieces of the ``dpsql serve`` tests: a served configuration on disk, a running server on
loopback, client DSNs, DuckDB's exact answers, and where psql is."""

from __future__ import annotations

import glob
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pandas as pd
import yaml

from dpsql.serve import ServeConfig, Server, hash_password

ANALYSTS = {  # name: (password, settings)
    "alice": ("alice-secret", {"budget": {"epsilon": 5.0}, "default_epsilon": 0.5}),
    "bob": ("bob-secret", {"budget": {"epsilon": 3.0}}),
    "carol": ("carol-secret", {"group": "research"}),
    "dave": ("dave-secret", {"group": "research", "noise": "gaussian"}),
}
GROUP_BUDGET = {"epsilon": 2.0, "delta": 1.0e-6}


def write_config(directory: Path, frame: pd.DataFrame, schema: dict[str, object], **extra: object) -> Path:
    """server.yaml serving ``frame`` as table ``adult`` (a Parquet file) to :data:`ANALYSTS`."""
    frame.to_parquet(directory / "adult.parquet")
    (directory / "adult.yaml").write_text(yaml.safe_dump(schema))
    analysts = {name: {"password": hash_password(password), **settings} for name, (password, settings) in ANALYSTS.items()}
    config = {
        "tables": {"adult": {"source": "adult.parquet", "schema": "adult.yaml"}},
        "ledgers": "ledgers",
        "groups": {"research": {"budget": GROUP_BUDGET}},
        "analysts": analysts,
        "workers": 4,
        **extra,
    }
    path = directory / "server.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def running(config: ServeConfig | Path) -> Iterator[Server]:
    """A server on a free loopback port (``server.address``), stopped at the end."""
    server = Server(config if isinstance(config, ServeConfig) else ServeConfig.load(config))
    server.start(host="127.0.0.1", port=0)
    try:
        yield server
    finally:
        server.stop()


def dsn(server: Server, user: str, password: str | None = None, **options: str) -> str:
    host, port = server.address  # type: ignore[misc]
    secret = ANALYSTS[user][0] if password is None else password
    extra = " ".join(f"{key}={value}" for key, value in options.items())
    return f"host={host} port={port} user={user} password={secret} dbname=dpsql connect_timeout=10 {extra}".strip()


def exact(frame: pd.DataFrame, sql: str) -> list[tuple[object, ...]]:
    """DuckDB's own answer on the raw rows (the table is clean: every row is counted by dpsql)."""
    database = duckdb.connect()
    database.register("adult", frame)
    rows = database.execute(sql).fetchall()
    database.close()
    return rows


def psql_binary() -> str | None:
    """psql from PATH or from a PostgreSQL installation (as .ci/services.sh installs it)."""
    found = shutil.which("psql")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"))
    return candidates[-1] if candidates else None
