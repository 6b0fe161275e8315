"""Progress bars for long work (LDP design, large planning, the backend's read of a big table): tqdm on
a terminal or in a notebook, silent otherwise.

Whether a bar shows: the call's ``progress=`` argument when given (True / False), else the
environment variable ``DPSQL_PROGRESS`` (``1`` / ``0``), else only when standard error is a terminal
or the code runs in a Jupyter kernel. Bars need tqdm (``pip install 'dpsql[progress]'``): without it
an automatic bar stays silent and an asked-for one raises :class:`~dpsql.errors.InterfaceError`.
A bar shows progress only, never a value computed from private rows.

>>> report = bar("designing", progress=False)   # None: nothing to report to
>>> report is None
True
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from dpsql.errors import InterfaceError

T = TypeVar("T")
ENVIRONMENT_VARIABLE = "DPSQL_PROGRESS"
Progress = bool | Callable[..., None] | None
"""A ``progress=`` argument: None (automatic), True / False, or a callable receiving the updates."""


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    get_ipython = getattr(shell, "get_ipython", None)
    return get_ipython is not None and "IPKernelApp" in getattr(get_ipython(), "config", {})


def wanted(progress: bool | None = None) -> bool:
    """Whether to show a bar: the argument, else ``DPSQL_PROGRESS``, else a terminal or notebook."""
    if progress is not None:
        return bool(progress)
    setting = os.environ.get(ENVIRONMENT_VARIABLE)
    if setting is not None:
        return setting.strip().lower() not in ("", "0", "false", "no", "off")
    return sys.stderr.isatty() or _in_notebook()


class Bar:
    """A tqdm bar fed by ``(done, total, detail)`` updates (the planner's callback shapes), closed
    when ``done`` reaches ``total``."""

    def __init__(self, tqdm: Callable[..., Any], description: str, unit: str, delay: float = 0.0) -> None:
        self._tqdm = tqdm
        self._description = description
        self._unit = unit
        self._delay = delay
        self._bar: Any = None

    def __call__(self, done: int, total: int, detail: object = None) -> None:
        if self._bar is None:
            self._bar = self._tqdm(
                total=total, desc=self._description, unit=self._unit, leave=False, file=sys.stderr, delay=self._delay
            )
        self._bar.update(done - self._bar.n)
        if isinstance(detail, float):
            self._bar.set_postfix(objective=f"{detail:.6g}", refresh=False)
        elif detail:
            self._bar.set_postfix_str(str(detail), refresh=False)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def bar(description: str, progress: Progress = None, unit: str = "step", delay: float = 0.0) -> Callable[..., None] | None:
    """A progress callback for ``description``, or None when no bar should show. A callable
    ``progress`` is returned as it is (the caller's own reporting). ``delay``: seconds before the bar
    appears (work that ends sooner shows nothing), e.g. 2.0 for planning that is usually quick."""
    if callable(progress):
        return progress
    if not wanted(progress):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if progress is None:
            return None
        raise InterfaceError("progress bars need tqdm, which is not installed: pip install 'dpsql[progress]'") from None
    return Bar(tqdm, description, unit, delay)


def watched(work: Callable[[], T], fraction: Callable[[], float | None] | None, description: str, delay: float = 2.0) -> T:
    """Run ``work`` while a daemon thread shows ``fraction()`` (0..1, or None when unknown) on a bar that
    appears after ``delay`` seconds — only where bars are wanted and the source can tell its progress.
    Nothing the watcher does can change or fail ``work``: its errors are swallowed."""
    show = bar(description, unit="%", delay=delay) if fraction is not None else None
    if show is None:
        return work()
    finished = threading.Event()

    def poll() -> None:
        try:
            while not finished.wait(0.5):
                done = fraction()  # type: ignore[misc]
                if done is not None and 0 <= done <= 1:
                    show(int(done * 100), 100)
        except Exception:  # noqa: BLE001 - a progress bar must never affect the statement
            return

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        return work()
    finally:
        finished.set()
        watcher.join(timeout=1.0)
        try:
            show.close()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001
            pass
