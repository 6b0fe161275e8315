"""One BLAS thread for the planner's small dense work, whatever the environment says.

The planner's matrices are small (a few hundred rows at most): with several BLAS threads they run no
faster, and on a loaded machine much slower (threads spinning against each other: the LDP design of
n = 64 took 190–265 s wall instead of 6 s with ``OPENBLAS_NUM_THREADS`` unset on a busy 2-core machine),
and the last bits of a result could depend on the thread count. :func:`one_blas_thread` wraps the
entry points (``plan()``, ``Plan.measure/answer``, the LDP optimizer and aggregator) in one BLAS
thread, set through ``threadpoolctl``'s library controllers; the previous setting is restored on
return, so the user's own numpy code is unaffected outside those calls (inside them, other threads of the process
that call BLAS are limited too, since the setting is per library).

Both OpenBLAS copies a pip install brings (numpy's and scipy's) are pinned: scipy.linalg is loaded
before the limit is taken, because a library loaded later would start with its default thread count.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, ParamSpec, TypeVar

if TYPE_CHECKING:
    from threadpoolctl import LibController, ThreadpoolController

Parameters = ParamSpec("Parameters")
Result = TypeVar("Result")


@functools.cache
def _controller() -> ThreadpoolController:
    """The BLAS libraries of numpy and scipy, found once (finding them costs ~2 ms)."""
    import numpy  # noqa: F401  (loads numpy's OpenBLAS)
    import scipy.linalg  # noqa: F401  (loads scipy's own OpenBLAS)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@functools.cache
def _blas_libraries() -> tuple[LibController, ...]:
    return tuple(library for library in _controller().lib_controllers if library.user_api == "blas")


@contextmanager
def single_blas_thread() -> Iterator[None]:
    """BLAS limited to one thread inside the block (restored after it). Only libraries not at one
    thread already are set and restored: a nested block, or an environment that pins BLAS itself, costs
    a read of each library's thread count (~1 µs; ``threadpoolctl``'s ``limit`` costs ~40 µs a call,
    which a small statement pays a few times)."""
    changed = [(library, count) for library in _blas_libraries() if (count := library.get_num_threads()) != 1]
    for library, _ in changed:
        library.set_num_threads(1)
    try:
        yield
    finally:
        for library, count in changed:
            library.set_num_threads(count)


def one_blas_thread(function: Callable[Parameters, Result]) -> Callable[Parameters, Result]:
    """``function`` run under :func:`single_blas_thread`."""

    @functools.wraps(function)
    def pinned(*args: Parameters.args, **kwargs: Parameters.kwargs) -> Result:
        with single_blas_thread():
            return function(*args, **kwargs)

    return pinned
