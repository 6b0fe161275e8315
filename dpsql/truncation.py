"""A statement that chooses its own bound on the rows per unit (``max_rows_per_unit: auto``).

Skewed data (a few persons with hundreds of visits) makes any declared bound a bad guess for some statement:
too low and the heavy units' rows are lost, too high and every answer carries their noise. With
``max_rows_per_unit: auto`` (``dpsql.schema``) the bounded rows keep up to the largest bound ``T`` rows per unit,
each ranked by the salted order and labelled with its *level* ``j`` among the bounds ``τ_0 = 1 < … < τ_L = T`` of
``planner.bound_levels`` (1, 2, 3, 4, 6, 8, 11, 16, …: a ratio of about √2; the first ``τ_j`` rows of a unit are
those of levels ``≤ j``) and with the level of its unit's last row (``dpsql.sql.bounded_rows``). A statement then,
in its one bounded read, counts every marginal its plan needs *per level* (the level is one more grouped column, so
the rows of any bound ``τ_j`` are the levels ``≤ j`` summed) and, in one more grouping set, the units by the level
of their last row (each unit's first row, level 0, counted once); and after the read:

1. spends :data:`dpsql.schema.CHOICE_SHARE` of its budget on that histogram of units (sensitivity 1 — the joins'
   fan-out when a unit's first row may meet several public rows) and chooses the bound that minimises the rows it
   would lose plus what a unit of bound costs the measurement in noise (``planner.BoundChoice``);
2. measures the workload on the rows of that bound with the rest of the budget, by the summed identity
   (``planner.identity_plan``, which can be built for any bound without failing: checked in prepare for the
   smallest and the largest), with the sensitivity of the chosen bound.

R2T (``planner.RaceToTheTop``, Dong, Fang, Yi, Tao and Machanavajjhala, SIGMOD 2022) chooses from the truncated
answers themselves; each of its ``L + 1`` levels has the sensitivity of its bound at a ``1/(L+1)`` share of the
choice's budget, so at a small share it prefers small bounds on skewed data (``benchmarks/joins.py`` measures both
on the same rows; the histogram's choice is the one used).

**Privacy.** The histogram is ``f·ε``-DP (``f·ρ``-zCDP); the chosen bound is a function of it; the measurement at
``(1 − f)·ε`` has the sensitivity of the bound it uses. The two compose to ``ε``, the statement's charge. Kept
measurements are neither used nor kept (their rows depend on the chosen bound).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

import planner
from dpsql.errors import NotSupportedError
from dpsql.schema import CHOICE_SHARE, ColumnDomain
from dpsql.sql.bounded_rows import LEVEL_NAME, TOP_LEVEL_NAME
from dpsql.table import Table
from dpsql.workloads import CompiledBatch


@dataclass(frozen=True)
class ChosenBound:
    """How one statement chooses its bound and measures with it (module doc)."""

    choice: planner.BoundChoice  # the histogram of units by level, at the choice's share of the budget
    privacy: planner.Privacy  # what the measurement spends
    weight: int  # w: what one kept private row adds to a marginal (a row's weight times the joins' fan-out)
    scale: int  # a row's weight in the marginals (the moment cells' scale; 1 without SUM/AVG)

    @property
    def levels(self) -> int:
        return len(self.choice.truncations)

    def domains(self) -> dict[str, ColumnDomain]:
        """The level columns' cells: 0 … L."""
        return {name: ColumnDomain(name, "range", (0, self.levels - 1)) for name in (LEVEL_NAME, TOP_LEVEL_NAME)}

    def plan(self, workload: planner.Workload, bound: int) -> planner.Plan:
        """The measurement's plan for rows bounded by ``bound`` per unit."""
        return planner.identity_plan(workload, self.privacy, bound * self.weight)

    def bound(self, arrays: Mapping[tuple[str, ...], np.ndarray], rng: object, noise: bool) -> int:
        """The chosen bound, from the units' histogram in ``arrays`` (its level-0 slice counts each unit's first row)."""
        histogram = arrays[HISTOGRAM][0] // self.scale
        return self.choice.choose(np.asarray(histogram, dtype=np.int64), rng=rng, noise=noise)  # type: ignore[arg-type]

    def describe(self) -> str:
        truncations = self.choice.truncations
        return (
            f"chosen privately among {', '.join(map(str, truncations[:4]))}{', …' if len(truncations) > 4 else ''} up to "
            f"{truncations[-1]} row(s) per unit from a histogram of the units' rows at {self.choice.privacy}, then measured at "
            f"{self.privacy} with the chosen bound"
        )


HISTOGRAM = (LEVEL_NAME, TOP_LEVEL_NAME)  # the grouping set of the units' histogram


def design(table: Table, batch: CompiledBatch, privacy: planner.Privacy, keyed: str | None, fan_out: int) -> ChosenBound:
    """The choice for a statement over ``table`` (``max_rows_per_unit: auto``); refuses what it cannot serve."""
    if keyed is not None or batch.distinct is not None:
        what = f"GROUP BY {keyed} (no declared domain)" if keyed is not None else "COUNT(DISTINCT unit)"
        raise NotSupportedError(
            f"{what} over {table.name!r}, whose max_rows_per_unit is auto, is not supported: declare a bound (max_rows_per_unit: N) "
            "for such statements"
        )
    assert batch.workload is not None
    levels = planner.bound_levels(table.schema.max_rows_per_unit // fan_out)  # those of the bounded rows' levels
    weight = batch.scale * fan_out
    measurement = privacy.scaled(1 - CHOICE_SHARE)
    for bound in (1, levels[-1]):  # the plan can be built for any bound in between: check the ends
        planner.identity_plan(batch.workload, measurement, bound * weight)
    unit_plan = planner.identity_plan(batch.workload, measurement, weight)
    noise = sum(float(np.sum(np.sqrt(v))) for v in unit_plan.query_variances()) * math.sqrt(2 / math.pi)
    penalty = noise / max(1, len(batch.workload.products)) / weight  # expected absolute noise per product and unit of bound, in rows
    choice = planner.BoundChoice(privacy.scaled(CHOICE_SHARE), levels, penalty, fan_out)
    choice.noise_parameter  # the noise can be drawn (checked here, before any read)
    return ChosenBound(choice, measurement, weight, batch.scale)


def bounded_to(arrays: Mapping[tuple[str, ...], np.ndarray], level: int) -> dict[tuple[str, ...], np.ndarray]:
    """Every marginal over the rows of levels ``≤ level``, the level column summed out."""
    found = {}
    for marginal, table in arrays.items():
        if marginal == HISTOGRAM:
            continue
        axis = marginal.index(LEVEL_NAME)
        kept = np.take(table, np.arange(level + 1), axis=axis).sum(axis=axis)
        found[tuple(c for c in marginal if c != LEVEL_NAME)] = np.asarray(kept, dtype=np.int64)
    return found
