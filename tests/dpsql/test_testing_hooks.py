"""dpsql.testing's hooks work only where DPSQL_TEST_HOOKS=1 was set before dpsql was imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dpsql.testing

REPOSITORY = Path(__file__).resolve().parents[2]
PROBE = """
import os, sys
import dpsql, dpsql.testing
os.environ["DPSQL_TEST_HOOKS"] = "1"  # too late: read when dpsql was imported
for hook in (dpsql.testing.noise_disabled, lambda: dpsql.testing.seeded(0)):
    try:
        with hook():
            print("entered")
    except dpsql.ProgrammingError as error:
        print("refused:", error)
print("noise on:", dpsql.testing.noise_enabled(), "seeded:", dpsql.testing.random_source() is not None)
"""


def test_hooks_are_refused_unless_enabled_before_import() -> None:
    environment = {k: v for k, v in os.environ.items() if k != dpsql.testing.ENABLING_VARIABLE}
    environment["PYTHONPATH"] = str(REPOSITORY)
    completed = subprocess.run(
        [sys.executable, "-c", PROBE], env=environment, cwd=REPOSITORY, capture_output=True, text=True, timeout=120, check=True
    )
    lines = completed.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("refused: dpsql.testing.") for line in lines[:2])
    assert "voids the privacy guarantee" in lines[0] and "DPSQL_TEST_HOOKS=1" in lines[0]
    assert lines[2] == "noise on: True seeded: False"


def test_the_suite_enables_them() -> None:
    assert dpsql.testing.HOOKS_ENABLED and os.environ[dpsql.testing.ENABLING_VARIABLE] == "1"
    with dpsql.testing.noise_disabled():
        assert not dpsql.testing.noise_enabled()
    with dpsql.testing.seeded(0):
        assert dpsql.testing.random_source() is not None
    assert dpsql.testing.noise_enabled() and dpsql.testing.random_source() is None
