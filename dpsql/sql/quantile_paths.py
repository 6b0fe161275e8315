"""Which quantiles an exponential mechanism answers instead of the measured CDF (``planner.quantile_mechanisms``).

Prepare (:func:`choose`): a quantiled column is a candidate when one product of the batch holds its CDF —
``Identity`` over the GROUP BY columns ⊗ ``Prefix`` over an integer or date ``range`` column, no WHERE mask
on it, no other grouping set ranking it — and every quantile of it asks a fraction strictly between 0 and 1
(``MIN``/``MAX`` read the CDF's ends, where an exponential mechanism picks among empty cells). The planner
compares, from public facts only, the CDF path (the plan's rank variances ``Var(F(k) − qN)``) with the
exponential family (``planner.choose``) and says which columns it takes and how the budget splits. Those
columns keep their CDF product in the linear plan, at its smaller share: it gives each group's noisy row
count (NULL when it rounds to 0, as on the CDF path) and the rank band whose inversion is the error bar.

Release (:meth:`QuantilePaths.release`): after the one read, each chosen column's exact histograms over
(GROUP BY cells, value cells; NULLs left out) go to its mechanism, which draws from OS entropy (a seed only
under ``dpsql.testing.seeded``); the chosen cells come back over the rows of the CDF product, one indicator
row per fraction, so the results follow the product's row order like every other answer. With the noise off
(tests) nothing is drawn and the exact CDF answers, as on the CDF path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

import planner
from dpsql.schema import ColumnDomain
from dpsql.sql.kinds import quantiles as quantile_kind
from dpsql.sql.parse import Quantile
from dpsql.sql.quantiles import rank_block
from dpsql.workloads import CompiledBatch
from planner import Factor, Identity, Prefix, Product, QuantileChoice, QuantileColumn


@dataclass(frozen=True)
class ExponentialColumn:
    """A column the exponential path answers: its CDF product (merged index), the marginal read for it,
    its distinct fractions and the mechanism."""

    column: str
    product: int
    marginal: tuple[str, ...]
    fractions: tuple[float, ...]
    mechanism: planner.ExponentialQuantiles


@dataclass(frozen=True)
class QuantilePaths:
    """The planner's choice for a batch's quantiled columns (``columns`` empty: the CDF path for all)."""

    choice: QuantileChoice
    columns: tuple[ExponentialColumn, ...]

    @property
    def exponential(self) -> bool:
        return bool(self.columns)

    def privacy(self, total: planner.Privacy) -> planner.Privacy:
        """What the linear plan spends: the rest after the mechanisms."""
        return self.choice.linear_privacy(total)

    def spent(self) -> float:
        """The mechanisms' budget in their family's unit (ε, or ρ), which adds up with the linear plan's."""
        return float(sum(_budget(c.mechanism.privacy) for c in self.columns))

    def marginals(self) -> tuple[tuple[str, ...], ...]:
        """The marginals the mechanisms read (each chosen column's product attributes)."""
        return tuple(dict.fromkeys(c.marginal for c in self.columns))

    def release(self, batch: CompiledBatch, marginals: Mapping[tuple[str, ...], np.ndarray], rng: object) -> dict[tuple[int, float], np.ndarray]:
        """Per (merged product, fraction), an indicator over the product's rows of each group's chosen cell.
        Never fails on non-negative counts."""
        assert batch.workload is not None
        chosen: dict[tuple[int, float], np.ndarray] = {}
        for column in self.columns:
            product = batch.workload.products[column.product]
            table = np.asarray(marginals[column.marginal])
            axes = [column.marginal.index(f.attributes[0]) for f in product.factors]  # the product's factor order
            ordered = np.transpose(table, axes)
            position = [f.attributes[0] for f in product.factors].index(column.column)
            cells = column.mechanism.cells
            histograms = np.moveaxis(ordered, position, -1)[..., :cells]
            group_shape = histograms.shape[:-1]
            rows = np.rint(histograms).astype(np.int64) // batch.scale  # with SUM/AVG in the batch a row weighs ``scale`` units
            picked = column.mechanism.release(rows.reshape(-1, cells), rng=rng)  # type: ignore[arg-type]
            width = product.factors[position].block.rows
            for index, fraction in enumerate(column.fractions):
                indicator = np.zeros((*group_shape, width))
                flat = indicator.reshape(-1, width)
                flat[np.arange(flat.shape[0]), picked[:, index]] = 1.0
                chosen[(column.product, fraction)] = np.moveaxis(indicator, -1, position).reshape(-1)
        return chosen

    def explain(self, see: str) -> list[tuple[str, float, str]]:
        """(column, predicted mean rank error of the path taken, a short detail ending in ``see``) per candidate."""
        rows = []
        taken = {c.column: c for c in self.columns}
        for name, (exponential, cdf) in self.choice.predicted.items():
            column = taken.get(name)
            if column is not None:
                mechanism = column.mechanism
                budget = f"ε {mechanism.privacy.epsilon:.3g}" if mechanism.privacy.is_laplace else f"ρ {mechanism.privacy.rho:.3g}"
                detail = f"exponential: {mechanism.name} per group at {budget}; CDF path {cdf:.3g} rows, kept at {self.choice.linear_share:.0%} ({see})"
            else:
                detail = f"CDF; the exponential family predicts {exponential:.3g} rows ({see})"
            rows.append((name, exponential if column is not None else cdf, detail))
        return rows


def _budget(privacy: planner.Privacy) -> float:
    return float(privacy.epsilon if privacy.is_laplace else privacy.rho)  # type: ignore[arg-type]


def candidates(batch: CompiledBatch, plan: planner.Plan) -> list[tuple[QuantileColumn, int, tuple[float, ...]]]:
    """The columns the exponential path could answer, with their CDF path's rank variances from ``plan``."""
    if batch.workload is None or batch.distinct is not None:
        return []
    items: dict[str, list[Quantile]] = {}
    for item in quantile_kind.items(b.query for s in batch.statements for b in s.branches):
        items.setdefault(item.column, []).append(item)
    found = []
    variances = plan.query_variances() if items else ()  # a batch without quantiles never computes every cell's variance here
    for column, quantiles in items.items():
        domain = batch.columns[column]
        fractions = tuple(sorted({q.fraction for q in quantiles}))
        if domain.kind != "range" or any(not 0.0 < q < 1.0 for q in fractions):
            continue
        holding = [i for i, p in enumerate(batch.workload.products) if any(column in f.attributes for f in p.factors)]
        if len(holding) != 1:
            continue
        index = holding[0]
        product = batch.workload.products[index]
        if not _plain_cdf(product, column):
            continue
        ranks = []
        for fraction in fractions:
            ranks.append(_mean_rank_variance(plan, product, variances[index], domain, column, fraction) / batch.scale**2)
        groups = math.prod(f.block.rows for f in product.factors if f.attributes != (column,))
        found.append((QuantileColumn(column, fractions, domain.value_cells, groups, tuple(ranks)), index, fractions))
    return found


def _plain_cdf(product: Product, column: str) -> bool:
    """``Identity`` over group columns ⊗ ``Prefix`` over ``column``, one attribute per factor."""
    for factor in product.factors:
        if len(factor.attributes) != 1:
            return False
        if factor.attributes == (column,):
            if not isinstance(factor.block, Prefix):
                return False
        elif not isinstance(factor.block, Identity):
            return False
    return True


def _mean_rank_variance(plan: planner.Plan, product: Product, variances: np.ndarray, domain: ColumnDomain, column: str, fraction: float) -> float:
    """``Var(F(k) − qN)`` averaged over groups and value cells (the plan's, else without the covariance)."""
    swapped = Product(product.domain, tuple(Factor(f.attributes, rank_block(f.block, domain, fraction)) if f.attributes == (column,) else f for f in product.factors), product.weight)
    found = plan.variances_of(swapped)
    position = [f.attributes for f in product.factors].index((column,))
    shape = product.row_shape
    if found is None:
        per_row = np.moveaxis(np.asarray(variances).reshape(shape), position, -1)
        found_cells = per_row[..., : domain.value_cells] + fraction**2 * per_row[..., domain.value_cells - 1 : domain.value_cells]
        return float(np.mean(found_cells))
    per_row = np.moveaxis(np.asarray(found).reshape(swapped.row_shape), position, -1)
    return float(np.mean(per_row[..., : domain.value_cells]))


def choose(batch: CompiledBatch, plan: planner.Plan, privacy: planner.Privacy, contributions: int) -> QuantilePaths | None:
    """The planner's choice for the batch's candidate columns (None when there are none). ``plan`` is the
    full-budget plan of the whole workload (the CDF path); ``contributions`` the rows per privacy unit."""
    found = candidates(batch, plan)
    if not found:
        return None
    assert batch.workload is not None
    taken = {index for _, index, _ in found}
    other = sum(float(np.sum(v)) for i, v in enumerate(plan.query_variances()) if i not in taken) / batch.scale**2
    choice = planner.choose_quantiles([c for c, _, _ in found], other, privacy, contributions)
    columns = []
    for column, index, fractions in found:
        mechanism = choice.mechanisms.get(column.name)
        if mechanism is not None:
            marginal = batch.workload.products[index].attributes
            columns.append(ExponentialColumn(column.name, index, marginal, fractions, mechanism))
    return QuantilePaths(choice, tuple(columns))
