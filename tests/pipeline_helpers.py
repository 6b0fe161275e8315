"""Tests' window on the pipeline: the prepared request a batch would run (nothing read or charged)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from unittest import mock

import dpsql
import dpsql.result
from dpsql import pipeline
from dpsql.sql import quantile_paths
from dpsql.request import Prepared


def prepare(
    connection: dpsql.Connection, statements: Sequence[str], *, epsilon: float | None = None, rho: float | None = None,
    weights: Sequence[float] | None = None,
) -> Prepared:
    """``pipeline.prepare`` of ``connection.workload(statements, ...)``."""
    session = connection._session
    return pipeline.prepare(session, pipeline.batch_request(session, statements, None, weights, epsilon, rho, False, False))


def release(connection: dpsql.Connection, prepared: Prepared) -> list[dpsql.result.ResultSet]:
    """``pipeline.release`` of a prepared request (charged and read like any statement)."""
    return pipeline.release(connection._session, prepared)


@contextlib.contextmanager
def cdf_path() -> Iterator[None]:
    """Every quantile from its measured CDF (the planner may give some to an exponential mechanism, which
    ``tests/dpsql/test_quantile_paths.py`` tests): for tests about the CDF."""
    with mock.patch.object(quantile_paths, "choose", lambda *args, **kwargs: None):
        yield
