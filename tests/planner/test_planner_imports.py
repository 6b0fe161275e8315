"""``import planner`` does not load scipy (nor cvxpy): the strategies import it where first used."""

from __future__ import annotations

import subprocess
import sys


def test_import_planner_leaves_scipy_and_cvxpy_unloaded() -> None:
    probe = "import planner, sys\nprint(sorted({m.split('.')[0] for m in sys.modules} & {'scipy', 'cvxpy'}))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
