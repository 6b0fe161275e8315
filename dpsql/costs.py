"""The one conversion between what the ledger charges (:class:`dpsql.accountant.Cost`) and what the planner
spends (:class:`planner.Privacy`).

A pure ε-DP cost is ``Privacy.laplace(ε)`` (charged as ε, and ρ = ε²/2 in zCDP); a zCDP cost is
``Privacy.zcdp(ρ)``. A key selection adds an (ε, δ)-DP part that the planner's privacy does not carry:
it is passed to :func:`cost_of` beside the measurement's privacy and composed by addition in the ledger.
"""

from __future__ import annotations

import planner
from dpsql.accountant import Cost


def privacy_of(cost: Cost) -> planner.Privacy:
    """What a statement charged ``cost`` may spend on its measurement."""
    return planner.Privacy.laplace(cost.epsilon) if cost.epsilon is not None else planner.Privacy.zcdp(cost.rho)


def cost_of(privacy: planner.Privacy, approximate_epsilon: float = 0.0, delta: float = 0.0) -> Cost:
    """The ledger charge of a measurement under ``privacy`` plus an (ε, δ)-DP part (a key selection's)."""
    if privacy.is_laplace:
        epsilon = float(privacy.epsilon)
        return Cost("laplace", epsilon**2 / 2, epsilon, float(approximate_epsilon), float(delta))
    return Cost("gaussian", float(privacy.rho), None, float(approximate_epsilon), float(delta))
