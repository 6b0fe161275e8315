"""The examples run and show what they claim (numbers, not just 'it ran')."""

from __future__ import annotations

import importlib.util
import math
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
        assert brackets == pytest.approx(table, abs=1e-6)
    separate = math.sqrt(2) * len(results) / example.EPSILON
    errors = [e for result in results for row in result.errors for e in row if isinstance(e, float)]
    assert len(errors) == 6 * 2 + 10 and max(errors) < separate / 2
    assert "people of sex F" in example.report(strategy, results, frame)
