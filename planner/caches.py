"""Memo caches of pure planning computations, cleared together (benchmarks time cold planning).

:class:`ArrayMemo` keeps the arrays computed for hashable keys (at most ``size``, the oldest dropped
first) and registers itself; :func:`register` adds any other clear function; :func:`clear_caches` empties
every registered cache. Cached values depend only on their keys (never on data or noise)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable

import numpy as np

_CLEARERS: list[Callable[[], None]] = []


def register(clear: Callable[[], None]) -> None:
    """Add a cache's ``clear`` function."""
    _CLEARERS.append(clear)


def clear_caches() -> None:
    """Empty every registered cache."""
    for clear in _CLEARERS:
        clear()


def digest(array: np.ndarray) -> str:
    """A hashable fingerprint of an array's contents (for memo keys)."""
    return hashlib.sha256(np.ascontiguousarray(array)).hexdigest()


class ArrayMemo:
    """Arrays by key, at most ``size`` of them; :meth:`get` hands out copies."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: dict[Hashable, np.ndarray] = {}
        register(self._values.clear)

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: Hashable, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """The array stored for ``key``, computed (and stored) on the first request."""
        if key not in self._values:
            if len(self._values) >= self.size:
                del self._values[next(iter(self._values))]  # the oldest
            self._values[key] = compute()
        return self._values[key].copy()
