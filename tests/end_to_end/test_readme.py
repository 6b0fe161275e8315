"""Every code block of README.md runs as written, on the demo files of the quick start.

The convention (stated in the README's quick start): in a fresh directory holding what
``dpsql demo --write .`` writes (``adult.csv``, ``adult.yaml``), plus ``.venv`` and ``examples`` as in
the repository, the Python and IPython blocks run in document order in one IPython shell, like the
cells of a notebook; each shell block runs on its own in bash; each YAML block must load as a schema.
``<!-- readme: skip REASON -->`` right before a block exempts it; ``<!-- readme: xfail REASON -->``
marks a block that must fail until REASON is fixed (strict: once it passes, this test fails).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from dpsql import demo
from dpsql.schema import Schema

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK = re.compile(r"(?:<!-- readme: (?P<mark>\w+) (?P<reason>[^\n]*?) -->\n)?^```(?P<language>\w*)\n(?P<code>.*?)^```$", re.S | re.M)
RUN = ("python", "ipython", "bash", "yaml")


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int
    mark: str | None
    reason: str | None

    @property
    def name(self) -> str:
        return f"README.md:{self.line} ({self.language})"


def blocks(language: str | None = None) -> list[Block]:
    text = README.read_text(encoding="utf-8")
    found = [
        Block(m["language"], m["code"], text.count("\n", 0, m.start("code")) + 1, m["mark"], m["reason"])
        for m in BLOCK.finditer(text)
    ]
    return [b for b in found if language is None or b.language == language]


def test_every_block_is_run_or_marked_with_a_reason() -> None:
    found = blocks()
    assert len([b for b in found if b.language in RUN]) >= 15
    for block in found:
        assert block.language in RUN or block.language == "", f"{block.name}: a fence language the test does not run"
        if block.mark is not None:
            assert block.mark in ("skip", "xfail") and block.reason, f"{block.name}: mark 'skip REASON' or 'xfail REASON'"
            assert block.language in RUN, f"{block.name}: only blocks that run can be marked"
    assert "../" not in README.read_text(encoding="utf-8"), "the README points outside the repository"


@pytest.fixture()
def tour(tmp_path: Path) -> Path:
    """A directory like the quick start's after step 2."""
    demo.write_files(tmp_path)
    (tmp_path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    return tmp_path


def environment() -> dict[str, str]:
    """The README's commands find this interpreter's venv (dpsql, python) first and import this tree."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "DPSQL_PROGRESS": "0"}


@pytest.mark.parametrize("block", [b for b in blocks("bash") if b.mark != "skip"], ids=lambda b: b.name)
def test_shell_block(block: Block, tour: Path) -> None:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=tour, env=environment(), capture_output=True, text=True, timeout=600)
    if block.mark == "xfail":
        assert done.returncode != 0, f"{block.name} runs now: remove its xfail mark ({block.reason})"
        return
    assert done.returncode == 0, f"{block.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("block", blocks("yaml"), ids=lambda b: b.name)
def test_yaml_block_is_a_schema(block: Block) -> None:
    Schema.load(yaml.safe_load(block.code))


def test_python_and_ipython_blocks_run_in_order_like_notebook_cells(tour: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tour)
    monkeypatch.setenv("PLOOMBER_STATS_ENABLED", "false")  # jupysql's telemetry: off (and no network in CI)
    monkeypatch.setenv("PLOOMBER_VERSION_CHECK_DISABLED", "true")
    monkeypatch.setitem(sys.modules, "pyspark.sql.connect.dataframe", None)  # jupysql + pyspark without grpcio
    if not any(e.name == "dpsql" for e in metadata.entry_points(group="sqlalchemy.dialects")):
        from sqlalchemy.dialects import registry  # a source tree run against an older install (CI installs afresh)

        registry.register("dpsql", "dpsql.sqlalchemy", "DpsqlDialect")
    import matplotlib

    matplotlib.use("Agg")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns.clear()
    shell.init_user_ns()
    ran = 0
    for block in blocks():
        if block.language not in ("python", "ipython") or block.mark == "skip":
            continue
        result = shell.run_cell(block.code, silent=True)
        error = result.error_before_exec or result.error_in_exec
        if block.mark == "xfail":
            assert error is not None, f"{block.name} runs now: remove its xfail mark ({block.reason})"
            continue
        assert error is None, f"{block.name} failed: {error!r}"
        ran += 1
    assert ran >= 8
    spent = shell.user_ns["conn"].budget_spent()
    # the tour's charges (3 × 0.1: derived columns and HAVING; 0.05: VAR by SET dpsql.epsilon; 0.05: jupysql's hinted
    # statement, on a connection of its own), re-use free
    assert spent.epsilon == pytest.approx(0.5 + 1.0 + 0.5 + 3 * 0.1 + 0.05 + 0.2 + 0.1 + 0.1 + 0.05)
