"""TEST-ONLY hooks. Never use these in an application: they void the privacy guarantee.

``noise_disabled()`` makes every statement release the exact answers the noise would have been
added to (the variances reported stay those of the noisy release), so tests can compare dpsql
with the database's own answers. ``seeded(seed)`` makes the noise, the bounding salt and the local
survey's randomization reproducible. Budgets are still checked and charged under both hooks.

Both hooks work only in a process whose environment had ``DPSQL_TEST_HOOKS=1`` when dpsql was
imported (the test suite's ``tests/conftest.py`` sets it first); anywhere else they raise
:class:`~dpsql.errors.ProgrammingError`, so an application cannot switch its noise off by accident
or through a library that calls them. This is not a wall against code running in the same process,
which can reach every object of the engine (see the README's privacy model).

>>> import dpsql.testing
>>> with dpsql.testing.noise_disabled():  # in a process started with DPSQL_TEST_HOOKS=1
...     pass  # statements executed here return exact counts
"""

from __future__ import annotations

import os
import random
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from dpsql.errors import ProgrammingError

ENABLING_VARIABLE = "DPSQL_TEST_HOOKS"
HOOKS_ENABLED = os.environ.get(ENABLING_VARIABLE) == "1"  # read once, when dpsql is imported

_lock = threading.Lock()
_noise_enabled = True
_generator: np.random.Generator | None = None
_python_generator: random.Random | None = None


def _require_enabled(hook: str) -> None:
    if not HOOKS_ENABLED:
        raise ProgrammingError(
            f"dpsql.testing.{hook}() voids the privacy guarantee and is for tests only: it works only in a process "
            f"started with {ENABLING_VARIABLE}=1 in its environment (set before dpsql is imported, as the test "
            "suite's tests/conftest.py does)"
        )


@contextmanager
def noise_disabled() -> Iterator[None]:
    """TEST-ONLY: release exact answers (process-wide while the block runs)."""
    global _noise_enabled
    _require_enabled("noise_disabled")
    with _lock:
        previous, _noise_enabled = _noise_enabled, False
    try:
        yield
    finally:
        with _lock:
            _noise_enabled = previous


@contextmanager
def seeded(seed: int) -> Iterator[np.random.Generator]:
    """TEST-ONLY: draw noise and bounding salts from ``numpy.random.default_rng(seed)``, and the local
    survey's randomization from ``random.Random(seed)``."""
    global _generator, _python_generator
    _require_enabled("seeded")
    with _lock:
        previous = _generator, _python_generator
        _generator, _python_generator = np.random.default_rng(seed), random.Random(seed)
        generator = _generator
    try:
        yield generator
    finally:
        with _lock:
            _generator, _python_generator = previous


def noise_enabled() -> bool:
    return _noise_enabled


def random_source() -> np.random.Generator | None:
    """The seeded generator inside :func:`seeded`, else None (= OS entropy)."""
    return _generator


def python_random() -> random.Random:
    """The plain-Python source for the local survey's randomization: seeded inside :func:`seeded`,
    else the operating system's CSPRNG."""
    generator = _python_generator
    return secrets.SystemRandom() if generator is None else generator


def bounding_salt() -> int:
    """A fresh salt for contribution bounding: OS entropy unless :func:`seeded` is active."""
    generator = _generator
    if generator is None:
        return secrets.randbits(62)
    return int(generator.integers(0, 1 << 62))
