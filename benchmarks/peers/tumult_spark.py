"""The Spark session and the data both Tumult peers (tumult_aggregates.py, tumult_quantiles.py) use: local,
one core, one shuffle partition, quiet, its warehouse in a temporary folder (runs in the peer's venv)."""

from __future__ import annotations

import logging
import os
import sys
import tempfile

from pyspark.sql import DataFrame, SparkSession
from shared_table import read_table  # beside this script: on sys.path when it runs


def local_spark() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers need this environment's packages
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")  # Spark's default of 200 partitions makes each tiny query slow
        .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="tumult-warehouse-"))  # not in the caller's directory
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.ERROR)
    return spark


def request_frame(spark: SparkSession, request: dict) -> DataFrame:
    """The request's CSV as a Spark frame of its group columns and the column, as integers (column names
    with '-' or '>' spelt with '_', as Spark wants)."""
    data = read_table(request["data"], [*request["groups"], request["column"]])
    return spark.createDataFrame(data.astype("int64"))
