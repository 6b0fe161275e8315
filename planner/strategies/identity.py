"""The identity strategy: measure every cell of the marginal on all attributes the workload reads.

One group (``C = 1``) gets the whole budget; every workload query is a sum of noisy cells, which is what
GLS gives for a single measured marginal. It applies to any workload (ranges and predicates included).
"""

from __future__ import annotations

import math

from planner.budget import Sensitivity
from planner.privacy import Privacy
from planner.strategies.base import Candidate
from planner.strategies.marginals import MarginalsCandidate
from planner.strategies.residual import MAX_MARGINAL_CELLS
from planner.workload import Workload


def identity_candidate(workload: Workload, privacy: Privacy, sensitivity: Sensitivity) -> MarginalsCandidate:
    union = workload.domain.canonical(a for p in workload.products for a in p.attributes)
    total = privacy.epsilon if privacy.is_laplace else privacy.rho
    return MarginalsCandidate(workload, privacy, sensitivity, [union], [total], name="identity")


def candidates(workload: Workload, privacy: Privacy, contributions: int, distinct_cells: bool = False) -> list[Candidate]:
    union = workload.domain.canonical(a for p in workload.products for a in p.attributes)
    if math.prod(workload.domain.shape(union)) > MAX_MARGINAL_CELLS:
        return []
    return [identity_candidate(workload, privacy, Sensitivity(contributions, distinct_cells))]
