"""``import dpsql`` and ``dpsql --help`` load no heavy library (numpy, scipy, DuckDB, sqlglot, the
planner, YAML): those are imported where first used. Checked on ``sys.modules`` of a fresh interpreter,
not by timing (``benchmarks/regress.py`` times them)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import dpsql

HEAVY = ("numpy", "scipy", "duckdb", "sqlglot", "planner", "yaml", "pandas", "pyarrow")


def loaded_after(code: str) -> list[str]:
    """The heavy top-level modules present in a fresh interpreter after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_dpsql_loads_no_heavy_library() -> None:
    assert loaded_after("import dpsql") == []


def test_dpsql_help_loads_no_heavy_library() -> None:
    code = "from dpsql.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    assert loaded_after(code) == []


def test_first_use_of_a_lazy_name_loads_the_engine() -> None:
    assert "duckdb" in loaded_after("import dpsql\ndpsql.connect")
    assert "yaml" in loaded_after("from dpsql import Schema")


def test_lazy_names_are_public_and_listed() -> None:
    assert set(dpsql.__all__) <= set(dir(dpsql))
    assert dpsql.connect is dpsql.connection.connect and dpsql.Cursor is dpsql.connection.Cursor
    from dpsql import Schema

    assert Schema is dpsql.schema.Schema
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        dpsql.nothing  # noqa: B018
