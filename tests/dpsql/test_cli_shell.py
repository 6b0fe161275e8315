"""``dpsql --version``, the per-user ledger of ``dpsql query``, ``dpsql shell`` (stdin and a terminal),
and ``dpsql demo --write``."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
import yaml

import dpsql
import dpsql.testing
from dpsql import cli, demo, userdata
from dpsql.schema import Schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"privacy_unit": "pid", "max_rows_per_unit": 2, "columns": {"sex": {"categories": ["F", "M"]}, "age": {"range": [18, 99]}}}
QUERY = "SELECT sex, COUNT(*) AS n FROM people WHERE age >= 30 GROUP BY sex"


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, str]:
    data = tmp_path / "people.csv"
    data.write_text("pid,sex,age\n1,F,40\n1,F,41\n2,M,25\n3,M,35\n4,F,31\n")
    schema = tmp_path / "people.yaml"
    schema.write_text(yaml.safe_dump(SCHEMA))
    return {"data": str(data), "schema": str(schema)}


def run(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(arguments)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_version_comes_from_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"dpsql {metadata.version('dpsql')}\n"
    assert dpsql.__version__ == metadata.version("dpsql")
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        dpsql.nonsense  # noqa: B018


def test_query_keeps_one_ledger_per_data_set_under_the_user_data_dir(files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["query", "--data", files["data"], "--schema", files["schema"]]
    code, _, err = run(common + ["--epsilon", "0.6", QUERY], capsys)
    assert code == cli.EXIT_BAD_INPUT and "no budget yet for this data set: give its total with --budget-epsilon" in err
    code, _, err = run(common + ["--budget-epsilon", "1", "--epsilon", "0.6", QUERY], capsys)
    ledger = userdata.default_ledger("people", files["data"], files["schema"])
    assert code == 0 and f"budget left: epsilon = 0.4 of 1 (ledger {ledger})" in err
    assert ledger.parent == Path(os.environ["XDG_DATA_HOME"]) / "dpsql" / "ledgers" and ledger.name.startswith("people-")
    code, _, err = run(common + ["--epsilon", "0.6", QUERY], capsys)  # the next call spends from the same budget
    assert code == cli.EXIT_BUDGET and "BudgetExceededError" in err
    code, _, err = run(common + ["--epsilon", "0.4", QUERY], capsys)
    assert code == 0 and "budget left: epsilon = 0 of 1" in err
    other_schema = tmp_path / "other.yaml"
    other_schema.write_text(yaml.safe_dump(SCHEMA))
    assert userdata.default_ledger("people", files["data"], other_schema) != ledger  # keyed by data AND schema
    assert userdata.default_ledger("people", Path(files["data"]).parent / "." / "people.csv", files["schema"]) == ledger


def test_the_user_data_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert userdata.data_home() == tmp_path / "xdg" / "dpsql"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setattr(sys, "platform", "linux")
    assert userdata.data_home() == Path.home() / ".local" / "share" / "dpsql"


SESSION = """.epsilon 0.25
SELECT sex, COUNT(*) AS n
  FROM people WHERE age >= 30 GROUP BY sex;
EXPLAIN SELECT sex, COUNT(*) FROM people GROUP BY sex;
SELECT COUNT(*) FROM nowhere;
.epsilon -1
.budget
.tables
.frobnicate
.quit
SELECT COUNT(*) FROM people;
"""


def test_shell_reads_statements_from_stdin(files: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(SESSION))
    with dpsql.testing.noise_disabled():
        code, out, _ = run(["shell", "--data", files["data"], "--schema", files["schema"], "--budget-epsilon", "1"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "-- each statement now costs epsilon = 0.25"
    assert lines[1] == "sex     n  n_stderr" and lines[2].startswith("F    3.00  ") and lines[3].startswith("M    1.00  ")  # text left, numbers right
    assert lines[4] == "-- spent epsilon = 0.25; budget left: epsilon = 0.75 of 1 (1 charge(s))"
    explain_end = lines.index("-- spent epsilon = 0; budget left: epsilon = 0.75 of 1 (1 charge(s))")
    explained = lines[5:explain_end]  # EXPLAIN as one line per row, nothing spent: no padded, wrapped table
    assert explained[0].startswith("statement: 1 = 1 — SELECT") and explained[-1].startswith("glossary: docs/glossary.md")
    assert "bounding: rows per unit = 2 — at most 2 random row(s) per 'pid'; rows outside the declared domains are dropped first" in out
    assert all(len(line) < 160 and "  " not in line for line in explained), explained
    error = lines[explain_end + 1]
    assert error.startswith("dpsql: ProgrammingError: FROM: unknown table 'nowhere'") and lines[explain_end + 2].startswith("-- spent epsilon = 0;")
    assert "dpsql: .epsilon needs a positive number, got '-1'" in lines
    assert "-- budget left: epsilon = 0.75 of 1 (1 charge(s))" in lines
    assert "people: privacy unit pid, 2 row(s) per unit" in lines and "  age: integer range [18, 99]" in lines
    assert "dpsql: unknown command '.frobnicate'; .help lists the commands" in lines
    assert lines[-1].startswith("dpsql: unknown command")  # .quit stopped before the last statement
    with dpsql.connect(ledger=userdata.default_ledger("people", files["data"], files["schema"])) as connection:
        assert connection.budget_spent().statements == 1


def read_until(fd: int, marker: bytes, timeout: float = 60.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {marker!r} in {seen!r}"
        if select.select([fd], [], [], remaining)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_shell_at_a_terminal_prompts_keeps_history_and_leaves_on_ctrl_d(files: dict[str, str], tmp_path: Path) -> None:
    main, child = pty.openpty()
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_DATA_HOME": str(tmp_path / "home"), "TERM": "dumb"}
    command = [sys.executable, "-m", "dpsql.cli", "shell", "--data", files["data"], "--schema", files["schema"], "--budget-epsilon", "2", "--epsilon", "0.5"]
    process = subprocess.Popen(command, stdin=child, stdout=child, stderr=child, env=environment, close_fds=True)
    os.close(child)
    try:
        banner = read_until(main, b"dpsql> ")
        assert b"table people" in banner and b"budget left: epsilon = 2 of 2 (0 charge(s))" in banner
        os.write(main, b"SELECT sex, COUNT(*) AS n\r")
        assert b"...> " in read_until(main, b"...> ")  # the statement goes on until ';'
        os.write(main, b"FROM people GROUP BY sex;\r")
        answer = read_until(main, b"dpsql> ")
        assert b"n_stderr" in answer and b"-- spent epsilon = 0.5; budget left: epsilon = 1.5 of 2 (1 charge(s))" in answer
        os.write(main, b"SELECT COUNT(*) FROM nowhere;\r")
        assert b"dpsql: ProgrammingError: FROM: unknown table 'nowhere'" in read_until(main, b"dpsql> ")
        os.write(main, b"\x04")  # Ctrl-D
        assert process.wait(timeout=60) == 0
    finally:
        os.close(main)
        if process.poll() is None:
            process.kill()
    history = (tmp_path / "home" / "dpsql" / "shell_history").read_text()
    assert "FROM people GROUP BY sex;" in history and "SELECT COUNT(*) FROM nowhere;" in history


def test_demo_write_produces_the_tour_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["demo", "--write", str(tmp_path / "tour")], capsys)
    assert code == 0 and out.split() == [str(tmp_path / "tour" / "adult.csv"), str(tmp_path / "tour" / "adult.yaml")]
    assert Schema.load(tmp_path / "tour" / "adult.yaml") == Schema.load(ROOT / "examples" / "adult.yaml") == Schema.load(demo.ADULT_SCHEMA)
    connection = dpsql.connect(budget=dpsql.Budget(1.0))
    connection.register("adult", str(tmp_path / "tour" / "adult.csv"), schema=tmp_path / "tour" / "adult.yaml")
    assert list(connection.tables()["adult"].column_types) == list(demo.ADULT_SIZES)
    # the schema says what the codes mean, in the generated file as in examples/adult.yaml (one text)
    written = (tmp_path / "tour" / "adult.yaml").read_text(encoding="utf-8")
    assert (ROOT / "examples" / "adult.yaml").read_text(encoding="utf-8") == demo.adult_schema_text() and written.endswith(demo.adult_schema_text())
    assert "  # age in years - 16: codes 1-74 are 17-90 years" in written and "  # 0 = female, 1 = male\n  sex: {categories: [0, 1]}" in written
    lines = written.splitlines()
    for column in demo.ADULT_SIZES:  # every column's line follows the note on its codes
        line = next(i for i, text in enumerate(lines) if text.startswith(f"  {column}:"))
        assert lines[line - 1] == f"  # {demo.ADULT_COLUMN_NOTES[column]}"


def test_the_adult_like_data_is_seeded_and_stays_in_its_domains() -> None:
    first, again = demo.generate_adult(5000, seed=4), demo.generate_adult(5000, seed=4)
    assert all((first[c] == again[c]).all() for c in first)
    for column, size in demo.ADULT_SIZES.items():
        assert len(first[column]) == 5000 and first[column].min() >= 0 and first[column].max() < size, column
    assert 0.15 < first["income>50K"].mean() < 0.35 and 0.6 < first["sex"].mean() < 0.75  # Adult: 24 % and 67 %
    rich_educated = first["income>50K"][first["education-num"] >= 12].mean()
    assert rich_educated > 1.5 * first["income>50K"][first["education-num"] <= 8].mean()
