"""``plan()``: choose the best strategy for a workload and wrap it in a :class:`Plan`.

>>> from planner import Domain, Workload, Privacy
>>> dom = Domain({"a": 2, "b": 2, "c": 2})
>>> p = plan(Workload.marginals(dom, [("a",), ("b", "c")]), Privacy.laplace(epsilon=1.0))
>>> p.expected_error() <= 32.0
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from planner.budget import Sensitivity
from planner.privacy import Privacy
from planner.strategies import direct
from planner.select import BoundUnavailableError, all_candidates, choose, least_row_variance, singular_value_sum
from planner.store import CoefficientEstimate
from planner.strategies.base import Answers, Candidate, GroupBudget, Measurement
from planner.strategies.residual import CoefficientCandidate, NonNegativityReport, nonnegative_answer
from planner.threads import one_blas_thread
from planner.workload import Product, Workload

MAX_EXPLAINED_PRODUCTS = 20


@dataclass(frozen=True)
class CandidateSummary:
    """A strategy the planner considered, with its exact expected error."""

    name: str
    detail: str
    expected_error: float


def _detail(candidate: Candidate) -> str:
    groups = candidate.group_budgets()
    return f"{len(groups)} group(s), {sum(g.rows for g in groups)} measured rows"


@dataclass(frozen=True, eq=False)
class Plan:
    """A chosen strategy with its budgets, recovery and exact per-query variances."""

    candidate: Candidate
    candidates: tuple[CandidateSummary, ...]
    contributions: int = 1
    distinct_cells: bool = False

    # -- what was chosen ---------------------------------------------------------------------------
    @property
    def workload(self) -> Workload:
        return self.candidate.workload

    @property
    def privacy(self) -> Privacy:
        return self.candidate.privacy

    @property
    def strategy_name(self) -> str:
        return self.candidate.name

    def expected_error(self) -> float:
        """Expected total squared error over all workload queries (weights applied, exact discrete noise)."""
        return self.candidate.expected_error()

    def query_variances(self) -> tuple[np.ndarray, ...]:
        return self.candidate.query_variances()

    def variances_of(self, product: Product) -> np.ndarray | None:
        """Exact variances of the rows of a product that is not in the workload (over its domain), under the
        chosen strategy's estimate; None where the strategy does not offer them (see ``Candidate.variances_of``)."""
        return self.candidate.variances_of(product)

    def group_budgets(self) -> tuple[GroupBudget, ...]:
        return self.candidate.group_budgets()

    @functools.cached_property
    @one_blas_thread
    def _singular_term(self) -> float | BoundUnavailableError:
        """``(Σσ)²/n`` of the workload (docs/math.md §7), or why it is unavailable."""
        try:
            return singular_value_sum(self.workload) ** 2 / self.workload.domain.size
        except BoundUnavailableError as error:
            return error

    def _bound(self, discrete: bool) -> float:
        term = self._singular_term
        if isinstance(term, BoundUnavailableError):
            raise term
        return term * least_row_variance(self.privacy, self.contributions, self.distinct_cells, discrete=discrete)

    def svd_bound(self) -> float:
        """Li & Miklau's SVD bound for *continuous* noise (docs/math.md §7), the papers' yardstick; the
        discrete noise dpsql adds can go below it. Raises :class:`BoundUnavailableError` when it cannot be
        computed without a large dense matrix."""
        return self._bound(discrete=False)

    def lower_bound(self) -> float:
        """The least expected total squared error of any strategy with integer rows and the planner's
        discrete noise (docs/math.md §7): no plan goes below it. Raises like :meth:`svd_bound`."""
        return self._bound(discrete=True)

    @property
    def ratio(self) -> float | None:
        """``expected_error / lower_bound`` (at least 1), or None when the bound is unavailable or 0."""
        return self._ratio(discrete=True)

    @property
    def svd_ratio(self) -> float | None:
        """``expected_error / svd_bound``: the papers' yardstick (continuous noise), comparable with HDMM's
        published ratios; discrete noise can take it below 1. None when the bound is unavailable or 0."""
        return self._ratio(discrete=False)

    def _ratio(self, discrete: bool) -> float | None:
        if isinstance(self._singular_term, BoundUnavailableError):
            return None
        bound = self._bound(discrete)
        if bound <= 0:
            return None
        ratio = self.expected_error() / bound
        return 1.0 if discrete and 1.0 - 1e-9 < ratio < 1.0 else ratio  # an optimal plan's rounding, not below the bound

    @property
    def bound_unavailable(self) -> str | None:
        """Why no lower bound is given, or None."""
        term = self._singular_term
        return str(term) if isinstance(term, BoundUnavailableError) else None

    # -- running it --------------------------------------------------------------------------------
    def required_marginals(self) -> tuple[tuple[str, ...], ...]:
        return self.candidate.required_marginals()

    @one_blas_thread
    def measure(self, marginals: Mapping[tuple[str, ...], np.ndarray], rng: object = None, noise: bool = True) -> Measurement:
        return self.candidate.measure(marginals, rng=rng, noise=noise)

    @one_blas_thread
    def answer(self, measurement: Measurement) -> Answers:
        return self.candidate.answer(measurement)

    def kept_estimates(self, measurement: Measurement) -> tuple[CoefficientEstimate, ...] | None:
        """The measurement as residual estimates a :class:`planner.store.MeasurementStore` can keep, or
        None when the strategy measures in another basis (Fourier, hierarchies, eigen, …)."""
        return self.candidate.kept_estimates(measurement)

    @one_blas_thread
    def answer_nonnegative(self, measurement: Measurement) -> tuple[Answers, NonNegativityReport]:
        """Answers consistent with non-negative counts (NNLS), and what that changed against GLS.
        Available for marginal-type strategies; the variances returned are the GLS ones."""
        if not isinstance(self.candidate, CoefficientCandidate):
            raise TypeError(f"non-negative answers are available for marginal-type strategies, not {self.strategy_name}")
        return nonnegative_answer(self.candidate, measurement)

    # -- explaining it -----------------------------------------------------------------------------
    def explain(self) -> str:
        lines = [f"strategy: {self.strategy_name} under {self.privacy}, {self.contributions} row(s) per unit"]
        error = self.expected_error()
        ratio = self.ratio
        bound_text = f"{self.lower_bound():.6g} (ratio {ratio:.3f})" if ratio is not None else f"unavailable ({self.bound_unavailable or 'zero'})"
        lines.append(f"expected total squared error: {error:.6g}; lower bound for this noise: {bound_text}")
        lines.append("budgets per group:")
        budget_name = "ε" if self.privacy.is_laplace else "ρ"
        for group in self.group_budgets():
            lines.append(
                f"  {group.name}: {group.rows} row(s), {budget_name} = {group.budget:.6g},"
                f" noise variance {group.noise_variance:.6g}"
            )
        lines.append("expected RMSE per query:")
        for index, (product, variances) in enumerate(zip(self.workload.products, self.query_variances())):
            if index == MAX_EXPLAINED_PRODUCTS:
                lines.append(f"  … {len(self.workload.products) - index} more products")
                break
            rmse = np.sqrt(variances)
            spread = f"{rmse.min():.4g}" if np.ptp(rmse) < 1e-6 * max(1.0, rmse.max()) else f"{rmse.min():.4g}–{rmse.max():.4g}"
            lines.append(f"  {_product_label(product)}: {product.rows} queries, RMSE {spread}")
        lines.append("strategies considered (expected total squared error):")
        for summary in sorted(self.candidates, key=lambda s: s.expected_error):
            lines.append(f"  {summary.name} [{summary.detail}]: {summary.expected_error:.6g}")
        return "\n".join(lines)


def _product_label(product: Product) -> str:
    parts = [f"{type(f.block).__name__}({', '.join(f.attributes)})" for f in product.factors] or ["Total"]
    return " ⊗ ".join(parts) + ("" if product.weight == 1 else f" (weight {product.weight:g})")


@one_blas_thread
def identity_plan(workload: Workload, privacy: Privacy, contributions: int = 1, distinct_cells: bool = False) -> Plan:
    """The identity strategy answered by summation (``planner.strategies.direct``): one noisy marginal
    over every attribute the workload reads, whatever the sizes of its blocks. It fails only when the
    whole budget buys noise the exact samplers cannot draw (:class:`planner.noise.NoiseParameterError`),
    which depends on ``privacy`` and ``contributions`` alone — so a caller that checks it once can build
    it later for any workload without failing."""
    candidate = direct.SummedIdentityCandidate(workload, privacy, Sensitivity(contributions, distinct_cells))
    return Plan(candidate, (CandidateSummary(candidate.name, _detail(candidate), candidate.expected_error()),), contributions, distinct_cells)


@one_blas_thread
def plan(
    workload: Workload,
    privacy: Privacy,
    contributions: int = 1,
    distinct_cells: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Plan:
    """The least-error plan among every strategy family for ``workload`` under ``privacy``.

    ``contributions`` bounds the rows one privacy unit adds; ``distinct_cells=True`` declares that those
    rows fall in distinct cells of every measured marginal (Gaussian L2 sensitivity √k for marginal groups).
    ``progress(families_done, families_total)`` is called as the strategy families are priced.
    """
    if not isinstance(workload, Workload):
        raise TypeError(f"plan() needs a planner.Workload, got {type(workload).__name__}")
    if not isinstance(privacy, Privacy):
        raise TypeError(f"plan() needs a planner.Privacy, got {type(privacy).__name__}")
    candidates = all_candidates(workload, privacy, contributions, distinct_cells, progress=progress)
    best = choose(candidates)
    summaries = tuple(CandidateSummary(c.name, _detail(c), c.expected_error()) for c in candidates)
    if not math.isfinite(best.expected_error()):
        raise ValueError("every strategy has infinite expected error for this workload")
    return Plan(best, summaries, contributions, distinct_cells)
