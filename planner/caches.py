"""Memo caches of pure planning computations, cleared together (benchmarks time cold planning).

A module that memoizes registers how to clear its cache with :func:`register`; :func:`clear_caches`
empties every registered cache. Cached values depend only on their keys (never on data or noise)."""

from __future__ import annotations

from collections.abc import Callable

_CLEARERS: list[Callable[[], None]] = []


def register(clear: Callable[[], None]) -> None:
    """Add a cache's ``clear`` function."""
    _CLEARERS.append(clear)


def clear_caches() -> None:
    """Empty every registered cache."""
    for clear in _CLEARERS:
        clear()
