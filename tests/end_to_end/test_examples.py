"""The examples run and show what they claim (numbers, not just 'it ran')."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_age_brackets_share_the_sex_counts_and_beat_separate_statements() -> None:
    example = load("age_brackets")
    strategy, results, frame = example.run()
    assert strategy.startswith("composite(") and strategy.endswith(" on sex")
    for sex in ("F", "M"):  # the brackets partition the ages: both statements imply the same sex counts
        brackets = sum(dict(result.rows)[sex] for result in results[:-1])
        table = sum(value for s, _, value in results[-1].rows if s == sex)
        assert brackets == pytest.approx(table, rel=1e-8)  # each released count carries 10 significant digits
    separate = math.sqrt(2) * len(results) / example.EPSILON
    errors = [e for result in results for row in result.errors for e in row if isinstance(e, float)]
    assert len(errors) == 6 * 2 + 10 and max(errors) < separate / 2
    assert "people of sex F" in example.report(strategy, results, frame)


def run_main(name: str, arguments: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setattr("sys.argv", [f"{name}.py", *arguments])
    load(name).main()
    return capsys.readouterr().out


def test_adult_runs_on_generated_data_with_a_ledger_across_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = str(tmp_path / "adult.ledger")
    first = run_main("adult", ["--ledger", ledger], monkeypatch, capsys)
    assert "budget left: epsilon = 2.000" in first and first.count("± ") == 10 + 16 + 1
    assert "budget left: epsilon = 0.750" in first
    again = run_main("adult", ["--ledger", ledger], monkeypatch, capsys)
    assert again.count("refused") == 1 and "budget left: epsilon = 0.000" in again  # 0.75 left: 0.5, then 0.25 fit


def test_local_survey_beats_randomized_response_on_generated_data(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main("local_survey", [], monkeypatch, capsys)
    pairs = [(int(a), int(b)) for a, b in re.findall(r"±\s+(\d+)\s+-?\d+\s+±\s+(\d+)", out)]
    assert len(pairs) == 10 + 5 + 2
    assert all(optimized < 0.75 * plain for optimized, plain in pairs)


def test_notebook_tour_saves_its_pictures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = load("notebook_tour").run(tmp_path)
    assert sorted(saved) == ["budget.png", "cube.png", "explain.html", "released.png", "result.html"]
    for name, path in saved.items():
        assert path.parent == tmp_path and path.stat().st_size > 500
        if name.endswith(".png"):
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "± " in saved["result.html"].read_text() and ">strategy</th>" in saved["explain.html"].read_text()
    assert "budget left: epsilon = 0.75" in capsys.readouterr().out
