"""Shared fixtures for the dpsql engine tests: a small seeded census-like table and its schema.

The table is clean (no NULL outside the nullable ``job`` column, every value inside its declared
domain, at most ``max_rows_per_unit`` rows per person), so with noise disabled dpsql must return
exactly DuckDB's own answers.
"""

from __future__ import annotations

import os
from pathlib import Path

# One BLAS thread per test process: the suite runs two xdist workers on two cores, and multi-threaded
# OpenBLAS on top of that oversubscribes the machine (the LDP optimizer slowed 20-50x). Set before
# numpy is imported.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
# dpsql.testing's hooks (noise off, seeded noise) work only where this is set before dpsql is imported.
os.environ["DPSQL_TEST_HOOKS"] = "1"

from collections.abc import Iterator  # noqa: E402

import numpy as np
import pandas as pd
import pytest

import dpsql

ADULT_SCHEMA: dict[str, object] = {
    "privacy_unit": "person_id",
    "max_rows_per_unit": 3,
    "columns": {
        "sex": {"categories": ["F", "M"]},
        "race": {"categories": [0, 1, 2, 3, 4]},
        "age": {"range": [17, 90]},
        "income": {"bins": [0, 10000, 50000, 100000, 1000000]},
        "job": {"categories": ["clerk", "engineer", "nurse", "teacher"], "nullable": True},
        "browser": "unknown",
    },
}


def adult_corpus(accepted: Path) -> list[Path]:
    """The accepted grammar corpus over the ``adult`` table: every statement under ``accepted`` but the join corpus
    (``joins/``), which reads the persons, visits and clinics tables of ``tests/dpsql/test_joins.py`` (run there)."""
    return sorted(p for p in accepted.rglob("*.sql") if "joins" not in p.relative_to(accepted).parts)


def make_adult(persons: int = 1200, seed: int = 7) -> pd.DataFrame:
    """1-3 rows per person; every value inside the schema's domains; ~10% NULL jobs."""
    rng = np.random.default_rng(seed)
    rows_per_person = rng.integers(1, 4, size=persons)
    person_id = np.repeat(np.arange(1, persons + 1), rows_per_person)
    n = len(person_id)
    jobs = np.array(["clerk", "engineer", "nurse", "teacher", None], dtype=object)
    return pd.DataFrame(
        {
            "person_id": person_id,
            "sex": rng.choice(["F", "M"], size=n),
            "race": rng.choice(5, size=n, p=[0.6, 0.2, 0.1, 0.07, 0.03]),
            "age": rng.integers(17, 91, size=n),
            "income": np.round(rng.lognormal(10.3, 1.0, size=n).clip(0, 999_999)).astype(np.int64),
            "job": jobs[rng.choice(5, size=n, p=[0.3, 0.2, 0.25, 0.15, 0.1])],
            "browser": rng.choice(["firefox", "chrome", "safari"], size=n),
        }
    )


@pytest.fixture(autouse=True)
def user_data_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The command line's per-user files (ledgers, shell history) go to a fresh directory, never $HOME."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg_data_home")))
    yield


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--audit-runs", type=int, default=None, metavar="N",
        help="privacy audits (tests/audit/): runs per neighbouring dataset (default: each audit's own, see docs/audit.md)",
    )


@pytest.fixture()
def audit_runs(request: pytest.FixtureRequest) -> int | None:
    """``--audit-runs N``, or None for each audit's default."""
    return request.config.getoption("--audit-runs")


@pytest.fixture(scope="session")
def adult_schema() -> dict[str, object]:
    return ADULT_SCHEMA


@pytest.fixture(scope="session")
def adult_frame() -> pd.DataFrame:
    return make_adult()


@pytest.fixture()
def adult_connection(adult_frame: pd.DataFrame) -> Iterator[dpsql.Connection]:
    """A connection with a large budget and the clean table registered as ``adult``."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1000.0, delta=1e-6))
    connection.register("adult", adult_frame, schema=ADULT_SCHEMA)
    yield connection
    connection.close()
