"""A backend over a SparkSession: the statement runs through ``spark.sql`` on the cluster.

It keeps no relations (no ``create_temporary``): every statement computes the table's bounded rows in a
subquery (:mod:`dpsql.bounded_tables`). A cached temporary view of them (``CACHE TABLE``) was measured
8× slower per statement than recomputing them (``local[2]``, 300,000 rows, a CUBE over 4 columns:
45 s against 6 s), so Spark gets the same rows and answers the other way.

Tables are looked up in the session's catalog (tables and temporary views); ``describe`` reads the
analysed schema only, no rows. A Spark or pandas DataFrame registered as a source becomes a
temporary view under an internal name; files are read with ``spark.read`` by the user and passed as
a DataFrame.

>>> from pyspark.sql import SparkSession                          # doctest: +SKIP
>>> backend = SparkBackend(SparkSession.builder.master("local[2]").getOrCreate())  # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from dpsql.backends.dialects import SPARK, engine_name
from dpsql.backends.rows import columns_from_rows
from dpsql.errors import OperationalError, ProgrammingError

try:  # py4j errors surface when the JVM itself fails (e.g. the session was stopped)
    from py4j.protocol import Py4JError
except ImportError:  # pragma: no cover - py4j ships with pyspark
    Py4JError = PySparkException  # type: ignore[misc,assignment]

_SPARK_ERRORS = (PySparkException, Py4JError)


class SparkBackend:
    """Runs statements with ``session.sql``; the session stays the caller's (``close`` does not stop it)."""

    dialect = SPARK
    max_grouping_columns = 64  # Spark refuses GROUPING SETS over more columns (GROUPING_SIZE_LIMIT_EXCEEDED)

    def __init__(self, session: SparkSession) -> None:
        self.session = session
        self.engine = engine_name(self.dialect)

    def run(self, sql: str) -> dict[str, np.ndarray]:
        try:
            frame = self.session.sql(sql)
            names = frame.columns
            rows = frame.collect()
        except _SPARK_ERRORS as error:
            raise OperationalError(f"{self.engine} failed to run the bounded aggregation: {error}") from error
        return columns_from_rows(names, rows)

    def describe(self, table: str) -> dict[str, str]:
        if not self.has_relation(table):
            raise ProgrammingError(
                f"no table or view {table!r} in the {self.engine} catalog of the current database; "
                "create it (saveAsTable, createOrReplaceTempView) or check the name"
            )
        try:
            return {name: type_name for name, type_name in self.session.table(_quoted(table)).dtypes}
        except _SPARK_ERRORS as error:
            raise OperationalError(f"cannot read the columns of {table!r} from {self.engine}: {error}") from error

    def has_relation(self, name: str) -> bool:
        try:
            return bool(self.session.catalog.tableExists(name))
        except _SPARK_ERRORS as error:
            raise OperationalError(f"cannot read the {self.engine} catalog: {error}") from error

    def register(self, internal_name: str, source: object) -> None:
        """Make a Spark or pandas DataFrame queryable as the temporary view ``internal_name``."""
        if isinstance(source, DataFrame):
            frame = source
        elif type(source).__module__.startswith("pandas") and type(source).__name__ == "DataFrame":
            frame = self.session.createDataFrame(source)  # type: ignore[arg-type]
        else:
            raise ProgrammingError(
                f"{self.engine} backend: cannot register a {type(source).__name__}; pass a Spark DataFrame "
                "(e.g. spark.read.parquet(path)), a pandas DataFrame, or the name of a table in the catalog"
            )
        frame.createOrReplaceTempView(internal_name)

    def close(self) -> None:
        """Does nothing: the SparkSession belongs to the caller."""


def _quoted(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"
