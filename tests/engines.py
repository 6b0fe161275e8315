"""The engines tests run dpsql on besides DuckDB: a PostgreSQL server and a local SparkSession.

PostgreSQL needs a server: ``eval "$(bash .ci/services.sh)"`` starts one on loopback and exports
``DPSQL_TEST_POSTGRES_DSN``. Spark runs pyspark in local mode (Java must be installed). When an engine
is missing its tests skip with the reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI") == "true"
POSTGRES_DSN_VARIABLE = "DPSQL_TEST_POSTGRES_DSN"

#: small, fast and loopback-only: tiny tables need no adaptive plans, and C1-compiled code starts sooner
SPARK_TEST_CONFIG = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def unavailable(reason: str) -> None:
    """Skip locally, fail in CI (CI must really exercise every engine)."""
    if IN_CI:
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason=reason)


def postgres_dsn() -> str:
    """The test server's DSN (skips, or fails in CI, when there is none or psycopg is missing)."""
    dsn = os.environ.get(POSTGRES_DSN_VARIABLE)
    if not dsn:
        unavailable('no PostgreSQL server: run eval "$(bash .ci/services.sh)" to start one')
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed: pip install -e '.[backends]'")
    return dsn  # type: ignore[return-value]


def local_spark_session(name: str) -> object:
    """A local SparkSession (``local[2]``, :data:`SPARK_TEST_CONFIG`); skips when pyspark is missing."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        unavailable("pyspark is not installed: pip install -e '.[backends]'")
    builder = SparkSession.builder.master("local[2]").appName(name)
    for key, value in SPARK_TEST_CONFIG.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
