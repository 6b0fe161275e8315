"""Cold planning time: every memo cache emptied first, CPU time of this process (one core)."""

from __future__ import annotations

import time

from planner import Plan, Privacy, Workload, plan
from planner.caches import clear_caches


def cold_plan(workload: Workload, privacy: Privacy) -> tuple[Plan, float]:
    """The plan and the CPU seconds it took with nothing memoized from earlier planning."""
    clear_caches()
    start = time.process_time()
    chosen = plan(workload, privacy)
    return chosen, time.process_time() - start
