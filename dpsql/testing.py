"""TEST-ONLY hooks. Never use these in an application: they void the privacy guarantee.

``noise_disabled()`` makes every statement release the exact answers the noise would have been
added to (the variances reported stay those of the noisy release), so tests can compare dpsql
with the database's own answers. ``seeded(seed)`` makes the noise and the bounding salt
reproducible. Budgets are still checked and charged under both hooks.

>>> import dpsql.testing
>>> with dpsql.testing.noise_disabled():
...     pass  # statements executed here return exact counts
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

_lock = threading.Lock()
_noise_enabled = True
_generator: np.random.Generator | None = None


@contextmanager
def noise_disabled() -> Iterator[None]:
    """TEST-ONLY: release exact answers (process-wide while the block runs)."""
    global _noise_enabled
    with _lock:
        previous, _noise_enabled = _noise_enabled, False
    try:
        yield
    finally:
        with _lock:
            _noise_enabled = previous


@contextmanager
def seeded(seed: int) -> Iterator[np.random.Generator]:
    """TEST-ONLY: draw noise and bounding salts from ``numpy.random.default_rng(seed)``."""
    global _generator
    with _lock:
        previous, _generator = _generator, np.random.default_rng(seed)
        generator = _generator
    try:
        yield generator
    finally:
        with _lock:
            _generator = previous


def noise_enabled() -> bool:
    return _noise_enabled


def random_source() -> np.random.Generator | None:
    """The seeded generator inside :func:`seeded`, else None (= OS entropy)."""
    return _generator


def bounding_salt() -> int:
    """A fresh salt for contribution bounding: OS entropy unless :func:`seeded` is active."""
    generator = _generator
    if generator is None:
        return secrets.randbits(62)
    return int(generator.integers(0, 1 << 62))
