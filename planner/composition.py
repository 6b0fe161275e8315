"""The budget split between measurements of different data that one statement composes sequentially.

A statement that measures several data vectors — the moment cells of two aggregated columns, the rows and the
(unit, group) pairs of ``COUNT(DISTINCT unit)`` — spends ``Σ εᵢ = ε`` (pure DP) or ``Σ ρᵢ = ρ`` (zCDP) over
them. Measurement ``i`` planned alone at the unit budget has expected total squared error ``Vᵢ``; at a share its
error is ``Vᵢ/εᵢ²`` (Laplace: variances scale with ``1/ε²``) or ``Vᵢ/ρᵢ`` (Gaussian: with ``1/ρ``). The shares
that minimise the statement's total error ``Σ Vᵢ/εᵢ²`` subject to ``Σ εᵢ = ε`` follow from the Lagrange condition
``Vᵢ/εᵢ³ = λ``: ``εᵢ ∝ Vᵢ^(1/3)``; for ``Σ Vᵢ/ρᵢ`` they are ``ρᵢ ∝ √Vᵢ`` (the same argument as the optimal
allocation of a budget over strata, Neyman 1934). Discrete noise's variance is within a few percent of the
continuous one's at the budgets where this matters, so the shares are optimal up to that.

>>> [round(s, 3) for s in composition_shares([1.0, 8.0], laplace=True)]
[0.333, 0.667]
>>> [round(s, 3) for s in composition_shares([1.0, 4.0], laplace=False)]
[0.333, 0.667]
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def composition_shares(errors: Sequence[float], laplace: bool) -> tuple[float, ...]:
    """The fractions of the budget (summing to 1) that minimise the total expected squared error of measurements
    whose errors at the whole budget are ``errors`` (module doc). A measurement without error (nothing to
    measure) gets a share as small as the others allow; non-finite errors are treated as the largest finite one."""
    errors = [float(e) for e in errors]
    if not errors:
        raise ValueError("composition_shares needs at least one measurement")
    finite = [e for e in errors if math.isfinite(e) and e > 0]
    largest = max(finite) if finite else 1.0
    power = 1 / 3 if laplace else 1 / 2
    weights = [(min(e, largest) if math.isfinite(e) else largest) ** power if e > 0 else 0.0 for e in errors]
    total = math.fsum(weights)
    if total <= 0:
        return tuple(1 / len(errors) for _ in errors)
    floor = 1e-6  # every measurement keeps a positive share: its plan needs a budget
    shares = [max(w / total, floor) for w in weights]
    scale = math.fsum(shares)
    return tuple(s / scale for s in shares)
