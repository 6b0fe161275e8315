"""Work started on several threads at once, for tests of concurrent charges and statements."""

from __future__ import annotations

import threading
from collections.abc import Callable


def at_once(count: int, work: Callable[[int], object], caught: type[BaseException] | tuple[type[BaseException], ...]) -> list[object]:
    """``work(i)`` on ``count`` threads released together; each one's return value, or the ``caught``
    exception it raised (its own object: each thread's)."""
    outcomes: list[object] = [None] * count
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = work(index)
        except caught as error:
            outcomes[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes
