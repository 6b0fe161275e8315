"""Every code block of README.md runs as written, on the demo files of the quick start, with exactly the
packages the quick start installs.

The convention (stated in the README's quick start): in a fresh directory holding what
``dpsql demo --write .`` writes (``adult.csv``, ``adult.yaml``), plus ``.venv`` and ``examples`` as in
the repository, the Python and IPython blocks run in document order in one IPython shell, like the
cells of a notebook — in a fresh interpreter that can import only the distributions ``pip install -e
".[examples]"`` (the quick start's step 1) installs (``readme_blocks.py``); each shell block runs on
its own in bash; each YAML block must load as a schema. ``<!-- readme: skip REASON -->`` right before a
block exempts it. ``.ci/quickstart.sh`` runs the quick start itself on a fresh clone.
"""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from dpsql import demo
from dpsql.schema import Schema
from readme_blocks import Block, normalized, quick_start
from readme_blocks import blocks as readme_blocks

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RUNNER = Path(__file__).resolve().parent / "readme_blocks.py"
RUN = ("python", "ipython", "bash", "yaml")
QUICK_START_EXTRA = "examples"


def blocks(language: str | None = None) -> list[Block]:
    return readme_blocks(README, language)


def installed_by(distribution: str, extras: frozenset[str]) -> set[str]:
    """The distributions ``pip install distribution[extras]`` installs (its requirements, recursively,
    markers evaluated here), read from the installed metadata."""
    found: set[str] = set()
    pending, seen = [(distribution, extras)], set()
    while pending:
        name, wanted = pending.pop()
        if (normalized(name), wanted) in seen:
            continue
        seen.add((normalized(name), wanted))
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: its marker excluded it from this platform
        found.add(normalized(name))
        for text in requires:
            requirement = Requirement(text)
            environments = [{"extra": e} for e in sorted(wanted)] or [{"extra": ""}]
            if requirement.marker is None or any(requirement.marker.evaluate(e) for e in environments):
                pending.append((requirement.name, frozenset(requirement.extras)))
    return found


def test_every_block_is_run_or_marked_with_a_reason() -> None:
    found = blocks()
    assert len([b for b in found if b.language in RUN]) >= 15
    for block in found:
        assert block.language in RUN or block.language == "", f"{block.name}: a fence language the test does not run"
        if block.mark is not None:
            assert block.mark == "skip" and block.reason, f"{block.name}: the one mark is 'skip REASON'"
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
    assert done.returncode == 0, f"{block.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("block", blocks("yaml"), ids=lambda b: b.name)
def test_yaml_block_is_a_schema(block: Block) -> None:
    Schema.load(yaml.safe_load(block.code))


def test_the_quick_start_installs_every_block_needs_and_ci_runs_it() -> None:
    """Step 1 installs the extra whose packages the blocks below are checked with; step 2 writes the tour's
    files; .ci/run runs both on a fresh clone (before: the README's arrow() and SQLAlchemy blocks needed
    packages the quick start did not install)."""
    install, demo_block = quick_start(README)
    assert f'.venv/bin/pip install -e ".[{QUICK_START_EXTRA}]"' in install.code and "python3 -m venv .venv" in install.code
    assert "dpsql demo --write ." in demo_block.code
    assert "bash .ci/quickstart.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    packages = installed_by("dpsql", frozenset({QUICK_START_EXTRA}))
    assert {"pandas", "pyarrow", "matplotlib", "sqlalchemy", "ipython", "jupysql", "ipywidgets", "tqdm"} <= packages
    assert not {"polars", "pytest", "psycopg", "pyspark"} & packages


def test_the_tour_reads_the_adult_codes_as_codes() -> None:
    """adult.yaml's age is years − 16 (hours-per-week hours − 1): the tour said "aged 20-40" with codes 20-40
    (36-56 years), called codes under 30 'young' and showed a median age code (21 = 37 years) as years."""
    text = README.read_text(encoding="utf-8")
    assert "`age`\nis years − 16 (code 4 is 20 years)" in text
    code = "\n".join(b.code for b in blocks() if b.language in ("python", "ipython", "bash") and "adult" in b.code)
    for wrong in ("WHERE age BETWEEN 20 AND 40", "'young'", "MEDIAN(age) AS median_age,", 'AVG("hours-per-week") AS mean_hours', '{"age": 30}'):
        assert wrong not in code, wrong
    assert "WHERE age BETWEEN 4 AND 24" in code and "(age + 16) // 10 * 10 AS decade" in code


def test_python_and_ipython_blocks_run_in_order_like_notebook_cells(tour: Path, tmp_path: Path) -> None:
    """In a fresh interpreter that imports only what the quick start installs (readme_blocks.py)."""
    allowed = tmp_path / "distributions.json"
    allowed.write_text(json.dumps(sorted(installed_by("dpsql", frozenset({QUICK_START_EXTRA})))), encoding="utf-8")
    environment_ = {**environment(), "PLOOMBER_STATS_ENABLED": "false", "PLOOMBER_VERSION_CHECK_DISABLED": "true"}  # jupysql: no telemetry
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(README), "--only", str(allowed)], cwd=tour, env=environment_, capture_output=True, text=True, timeout=900
    )
    assert done.stdout, done.stderr[-3000:]
    *ran, last = json.loads(done.stdout.strip().splitlines()[-1])
    for block in ran:
        assert block["error"] is None, f"{block['name']} failed: {block['error']}\n{done.stderr[-3000:]}"
    assert done.returncode == 0 and len(ran) >= 8
    # the tour's charges (3 × 0.1: derived columns and HAVING; 0.05: VAR by SET dpsql.epsilon; 0.05: jupysql's hinted
    # statement, on a connection of its own), re-use free (the (sex, race) and (race) counts at 0.1 from the 3-way CUBE at 1, whose
    # balanced plan holds each set to its own 1/8 share)
    assert last["spent"] == pytest.approx(0.5 + 1.0 + 0.5 + 3 * 0.1 + 0.05 + 0.2 + 0.1 + 0.1 + 0.05)


def test_docs_cite_papers_not_internal_documents() -> None:
    """README and docs/ named documents outside the repository ("seed 004", "issue 14", "wave 2")."""
    internal = re.compile(r"\bseeds?[ /]\d|\bseeds/|\bissue \d|\bissues? \d+'s|\bwave \d|\bMATH\.md|\bDESIGN\.md")
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        found = internal.findall(page.read_text(encoding="utf-8"))
        assert not found, f"{page.name} cites internal documents: {found}"
    math = " ".join((ROOT / "docs" / "math.md").read_text(encoding="utf-8").split())
    assert '"Accurate and efficient private release of datacubes and contingency tables"' in math
