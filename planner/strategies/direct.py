"""The identity strategy answered by summation: one noisy marginal, no basis, no size limit.

It measures every cell of the marginal on all attributes the workload reads with one budget (one group,
``C = 1``) and answers each workload query as the same linear combination of noisy cells — which is GLS
for a single measured marginal. Its variances have a closed form per product: the cell variance ``v``
times the squared norm of the query over the marginal's cells, i.e. ``v · Π_{a ∉ product} n_a`` times the
Kronecker product of the row squared norms of the product's blocks.

Unlike the marginal families (``planner.strategies.identity``/``marginals``), it never builds a per-
attribute basis, so it applies to blocks of any size; it is offered when those families are not (a
GROUP BY over tens of thousands of released keys), and :func:`identity_plan`, a plan that can be built
for every workload of implicit blocks whatever its sizes, is what callers use when a plan must not fail.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import numpy as np

from planner.budget import Sensitivity, noise_for_group, sample_noise
from planner.privacy import Privacy
from planner.recovery import integer_counts
from planner.strategies.base import Answers, Candidate, GroupBudget, Measurement
from planner.workload import Block, Explicit, Product, Workload, marginal_for

NAME = "identity (summed)"


def row_norms2(block: Block) -> np.ndarray:
    """Squared norm of each row of a block (0/1 blocks: the number of cells the row sums)."""
    if isinstance(block, Explicit):
        return (block.values**2).sum(axis=1)
    return np.asarray(block.apply(np.ones(block.size), 0), dtype=float)


def row_norms2_over(product: Product, attributes: tuple[str, ...]) -> np.ndarray:
    """Squared norms of the product's rows as queries over the cells of ``attributes`` ⊇ its own (an
    attribute it sums out multiplies every norm by its size), in the Kronecker order of its factors."""
    domain = product.domain
    spread = math.prod(domain.size_of(a) for a in attributes if a not in product.attributes)
    norms = functools.reduce(np.multiply.outer, [row_norms2(f.block) for f in product.factors], np.asarray(1.0))
    return spread * np.asarray(norms, dtype=float).reshape(-1)


class SummedIdentityCandidate(Candidate):
    """Measure the union marginal at the whole budget; answers are sums of its noisy cells."""

    name = NAME

    def __init__(self, workload: Workload, privacy: Privacy, sensitivity: Sensitivity) -> None:
        self._workload = workload
        self._privacy = privacy
        self.union = workload.domain.canonical(a for p in workload.products for a in p.attributes)
        total = privacy.epsilon if privacy.is_laplace else privacy.rho
        self.noise = noise_for_group(privacy, total, sensitivity, 1.0, distinct_applies=True)
        self.budget = float(total)

    @property
    def workload(self) -> Workload:
        return self._workload

    @property
    def privacy(self) -> Privacy:
        return self._privacy

    @functools.cached_property
    def _variances(self) -> tuple[np.ndarray, ...]:
        return tuple(self.noise.variance * row_norms2_over(p, self.union) for p in self.workload.products)

    def query_variances(self) -> tuple[np.ndarray, ...]:
        return self._variances

    def group_budgets(self) -> tuple[GroupBudget, ...]:
        cells = math.prod(self.workload.domain.shape(self.union))
        label = "marginal (" + ", ".join(self.union) + ")" if self.union else "marginal (total)"
        return (GroupBudget(label, cells, self.budget, self.noise.variance),)

    def required_marginals(self) -> tuple[tuple[str, ...], ...]:
        return (self.union,)

    def measure(self, marginals: Mapping[tuple[str, ...], np.ndarray], rng: object = None, noise: bool = True) -> Measurement:
        table = integer_counts(marginal_for(self.workload.domain, marginals, self.union), self.union)
        if noise:
            table = table + sample_noise(self.privacy, np.full(table.shape, self.noise.parameter), rng).reshape(table.shape)
        return Measurement(self.name, {"cells": table}, {"cells": np.full(table.shape, self.noise.variance)}, self.privacy)

    def answer(self, measurement: Measurement) -> Answers:
        if measurement.strategy != self.name:
            raise ValueError(f"measurement was made by strategy {measurement.strategy!r}, not {self.name!r}")
        domain = self.workload.domain
        table = {self.union: np.asarray(measurement.values["cells"], dtype=float)}
        values = tuple(p.unweighted_answer(marginal_for(domain, table, p.attributes)) for p in self.workload.products)
        return Answers(values, self.query_variances())


def candidates(workload: Workload, privacy: Privacy, contributions: int, distinct_cells: bool = False) -> list[Candidate]:
    return [SummedIdentityCandidate(workload, privacy, Sensitivity(contributions, distinct_cells))]
