"""Backends run the one bounded aggregation statement of a query (see :mod:`dpsql.backends.base`)."""

from dpsql.backends.base import Backend
from dpsql.backends.duckdb import DuckDBBackend

__all__ = ["Backend", "DuckDBBackend"]
