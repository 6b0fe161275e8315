"""Progress bars: shown on a terminal or in a notebook, silent otherwise, switchable."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

import dpsql.local
from dpsql import progress
from planner.ldp import optimize

SCHEMA = {"privacy_unit": None, "max_rows_per_unit": 1, "columns": {"sex": {"categories": ["F", "M"]}, "race": {"categories": [0, 1, 2]}}}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_argument_wins_then_the_environment_then_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not progress.wanted() and progress.wanted(True)
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert progress.wanted() and not progress.wanted(False)
    for setting, shown in (("0", False), ("off", False), ("1", True), ("yes", True)):
        monkeypatch.setenv(progress.ENVIRONMENT_VARIABLE, setting)
        assert progress.wanted() is shown
        assert progress.wanted(not shown) is (not shown)


class RecordingTqdm:
    """tqdm's interface as Bar uses it, recording what it is told."""

    made: list[RecordingTqdm] = []

    def __init__(self, **options: object) -> None:
        self.options, self.n, self.postfix, self.closed = options, 0, None, False
        RecordingTqdm.made.append(self)

    def update(self, steps: int) -> None:
        self.n += steps

    def set_postfix(self, refresh: bool, **values: str) -> None:
        self.postfix = values

    def close(self) -> None:
        self.closed = True


def test_a_bar_follows_the_updates_and_closes_at_the_end() -> None:
    report = progress.Bar(RecordingTqdm, "designing", "iteration", delay=2.0)
    for done in (10, 20):
        report(done, 30, 2.0 - done / 100)
    shown = RecordingTqdm.made[-1]
    assert (shown.n, shown.postfix, shown.closed) == (20, {"objective": "1.8"}, False)
    assert shown.options["total"] == 30 and shown.options["desc"] == "designing" and shown.options["unit"] == "iteration"
    assert shown.options["delay"] == 2.0 and shown.options["file"] is sys.stderr
    report(30, 30, 1.5)
    assert shown.n == 30 and shown.closed


def test_an_asked_for_bar_is_tqdms_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    report = progress.bar("designing", progress=True, unit="iteration")
    assert isinstance(report, progress.Bar)
    report(10, 30, 1.5)
    assert "designing:" in stream.getvalue() and "/30" in stream.getvalue()
    report(30, 30, 1.5)


def test_no_bar_without_a_terminal_and_callables_pass_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress.bar("planning") is None
    seen: list[tuple[int, int]] = []
    assert progress.bar("planning", lambda done, total: seen.append((done, total))) is not None


def test_a_missing_tqdm_is_silent_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    monkeypatch.setattr(sys, "stderr", Terminal())
    monkeypatch.delenv(progress.ENVIRONMENT_VARIABLE, raising=False)
    assert progress.bar("planning") is None
    with pytest.raises(dpsql.InterfaceError, match=r"pip install 'dpsql\[progress\]'"):
        progress.bar("planning", progress=True)


def test_survey_design_reports_every_iteration_and_designs_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    statements = ["SELECT sex, race, COUNT(*) FROM people GROUP BY sex, race"]
    seen: list[tuple[int, int, float]] = []
    reported = dpsql.local.design(SCHEMA, statements, 1.0, seed=3, restarts=2, iterations=40, progress=lambda *update: seen.append(update))
    assert [done for done, _, _ in seen] == list(range(10, 81, 10)) and {total for _, total, _ in seen} == {80}
    assert all(later <= earlier for (_, _, earlier), (_, _, later) in zip(seen, seen[1:]))  # the best objective so far
    silent = dpsql.local.design(SCHEMA, statements, 1.0, seed=3, restarts=2, iterations=40)  # stderr is no terminal here
    assert capsys.readouterr().err == ""
    assert np.array_equal(silent.mechanism.to_json(), reported.mechanism.to_json())


def test_the_optimizer_callback_is_the_planners_own() -> None:
    seen: list[int] = []
    optimize(np.tril(np.ones((4, 4))), 1.0, seed=0, restarts=1, iterations=20, progress=lambda done, total, best: seen.append(done))
    assert seen == [10, 20]


def test_a_long_read_shows_its_progress_and_a_broken_watcher_changes_nothing(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The backend's read runs while a watcher polls its progress; the watcher's own failures are swallowed."""
    import time

    from dpsql import progress

    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(progress, "bar", lambda *args, **kwargs: (lambda done, total, detail=None: seen.append((done, total))))

    def slow() -> str:
        time.sleep(1.2)
        return "rows"

    assert progress.watched(slow, lambda: 0.5, "reading", delay=0.0) == "rows"
    assert seen and seen[0] == (50, 100)
    assert progress.watched(slow, lambda: 1 / 0, "reading", delay=0.0) == "rows"  # type: ignore[return-value]
