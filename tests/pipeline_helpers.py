"""Tests' window on the pipeline: the prepared request a batch would run (nothing read or charged)."""

from __future__ import annotations

from collections.abc import Sequence

import dpsql
import dpsql.result
from dpsql import pipeline
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
