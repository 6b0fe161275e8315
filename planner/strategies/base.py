"""The contract every strategy family implements.

A strategy family looks at a workload and a privacy spec and, if it applies, returns a
:class:`Candidate`: a fully budgeted measurement strategy with its recovery, able to state its exact
expected error before any data is touched, to say which marginals it must be fed, to measure them with
discrete noise, and to turn measurements into workload answers with their variances.

The selector (``planner.select``) asks every family for candidates and keeps the one with the least
expected error; ``planner.plan`` wraps it in a :class:`~planner.plan.Plan`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from planner.privacy import Privacy
from planner.store import CoefficientEstimate
from planner.workload import Product, Workload


@dataclass(frozen=True)
class GroupBudget:
    """One group of strategy rows (docs/math.md §2) and the share of the budget it receives."""

    name: str  # e.g. "marginal (sex, race)", "level 3", "coefficient 0101"
    rows: int  # measurement rows in the group
    budget: float  # ε_g (Laplace) or ρ_g (zCDP)
    noise_variance: float  # variance of the discrete noise added to each row (exact, discrete)


@dataclass(frozen=True)
class Measurement:
    """Noisy strategy answers. ``values`` is keyed by group/strategy-specific names; ``privacy`` is what
    producing it cost (the accountant charges exactly this)."""

    strategy: str
    values: Mapping[str, np.ndarray]
    variances: Mapping[str, np.ndarray]
    privacy: Privacy
    metadata: Mapping[str, object] = field(default_factory=dict)


RESIDUE = 1e-9
"""Values within this many standard errors of 0 are least-squares residue (:class:`Answers`)."""


@dataclass(frozen=True)
class Answers:
    """Workload answers, one array per workload product (rows in the product's Kronecker order)."""

    values: tuple[np.ndarray, ...]
    variances: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        """Rounding residue of the least-squares solve is zero: a value within :data:`RESIDUE` standard errors
        of 0 (``8.6e-14`` beside an error of 2.8: a noisy count that came out exactly 0) is 0, so a count
        of no rows is 0 and what is computed from it (AVG of that group: NULL) is what 0 gives."""
        cleaned = []
        for values, variances in zip(self.values, self.variances):
            values = np.asarray(values)
            if values.dtype.kind == "f" and values.size:
                residue = np.abs(values) <= RESIDUE * np.sqrt(np.maximum(np.asarray(variances, dtype=np.float64), 0.0))
                values = np.where(residue, 0.0, values) if residue.any() else values
            cleaned.append(values)
        object.__setattr__(self, "values", tuple(cleaned))

    @property
    def standard_errors(self) -> tuple[np.ndarray, ...]:
        return tuple(np.sqrt(v) for v in self.variances)


class Candidate(ABC):
    """A budgeted strategy for one workload and privacy spec."""

    #: short family name shown to users: "identity", "marginals", "fourier", "hierarchy(b=4)", …
    name: str

    @property
    @abstractmethod
    def workload(self) -> Workload: ...

    @property
    @abstractmethod
    def privacy(self) -> Privacy: ...

    @abstractmethod
    def query_variances(self) -> tuple[np.ndarray, ...]:
        """Exact expected variance of every workload query (unweighted), one array per product."""

    def variances_of(self, product: Product) -> np.ndarray | None:
        """Exact variances of the rows of a product *outside* the workload (over the workload's domain) under
        this strategy's estimate — e.g. of differences of workload queries, whose covariances the per-query
        variances leave out — or None where the strategy does not offer them."""
        return None

    def expected_error(self) -> float:
        """Expected total squared error, weights applied: ``Σ_products w² Σ_rows Var``."""
        return float(sum(p.weight**2 * v.sum() for p, v in zip(self.workload.products, self.query_variances())))

    @abstractmethod
    def group_budgets(self) -> tuple[GroupBudget, ...]:
        """The groups and their budgets (they sum to the privacy spec's ε or ρ)."""

    @abstractmethod
    def required_marginals(self) -> tuple[tuple[str, ...], ...]:
        """Attribute tuples (domain order) whose exact count marginals :meth:`measure` needs."""

    @abstractmethod
    def measure(
        self,
        marginals: Mapping[tuple[str, ...], np.ndarray],
        rng: object = None,
        noise: bool = True,
    ) -> Measurement:
        """Compute the strategy rows from exact marginals and add discrete noise.

        ``rng`` is passed to ``planner.noise`` (None = OS entropy). ``noise=False`` is a test hook that
        returns the exact strategy answers with the variances the noise would have had."""

    @abstractmethod
    def answer(self, measurement: Measurement) -> Answers:
        """Consistent workload answers (GLS) and their exact variances from a measurement."""

    def kept_estimates(self, measurement: Measurement) -> tuple[CoefficientEstimate, ...] | None:
        """The measurement as uncorrelated Helmert residual estimates (``planner.store``), or None when
        this strategy's measurements cannot be described that way (they are then not kept)."""
        return None
