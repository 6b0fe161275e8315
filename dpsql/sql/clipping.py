"""``clip: auto`` and ``bounds: auto``: SUM/AVG/VARIANCE/STDDEV of a column clamp at private clips.

``clip: auto`` (:class:`AutomaticClip`) chooses an upper clip within declared bounds; ``bounds: auto``
(:class:`AutomaticBounds`) chooses each ``auto`` end within the public envelope ±2^53 from the values' magnitude
codes (``dpsql.sql.magnitudes``), below and above a public origin (the declared end, else 0). Both work alike:

Prepare (:func:`share`, :func:`design`): the batch's aggregated column has ``clip: auto`` in the schema. The
statement's budget is split before anything else is planned: :func:`share` for the clips
(``planner.UPPER_CLIP_SHARE`` for ``clip: auto``, ``planner.CLIP_SHARE`` for ``bounds: auto``), the rest for the
linear plan — one charge for both. The moment cells keep their shape (``GRID`` steps of the clip's width, the
same sensitivity for any clip), so the plan is made before the clip is known, and the clip's mechanism (a
``planner.UpperClip`` over the column's base grid) weighs the noise that plan predicts (:func:`noise_slope`)
against the bias of each clip.

Release (:meth:`AutomaticClip.release`): the one read returns every row's value as an index on the base grid
(``ValueEncoding.index``) beside the group cells; the rows per index go to the mechanism, which draws from OS
entropy (a seed only under ``dpsql.testing.seeded``); the moment cells of the chosen clip are computed from
the same result (``BoundedAggregation.marginal_arrays``) and measured. With the noise off (tests) the clip is the
declared upper bound, so the answers equal DuckDB's on values clamped to the bounds. The chosen clip is a
release like any answer: the explanation states it, and the error bars add an estimate of the bias it leaves
(``ValueEncoding.clipped``). A clipped measurement is never kept for re-use: its cells mean another width at
every statement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

import planner
from dpsql.sql.bounded import BoundedAggregation
from dpsql.sql.moments import ValueEncoding
from dpsql.workloads import CompiledBatch
from planner import UpperClip

MIN_SLOPE = 1e-6
"""A plan whose sums carry (next to) no noise still gives the clip a positive noise slope."""


@dataclass(frozen=True)
class AutomaticClip:
    """The clip of the batch's aggregated column: its mechanism and its share of the statement's budget."""

    encoding: ValueEncoding
    mechanism: UpperClip
    share: float

    def spent(self) -> float:
        """The mechanism's budget in its family's unit (ε, or ρ), which adds up with the linear plan's."""
        privacy = self.mechanism.privacy
        return float(privacy.epsilon if privacy.is_laplace else privacy.rho)  # type: ignore[arg-type]

    def release(self, aggregation: BoundedAggregation, result: Mapping[str, np.ndarray], rng: object, noise: bool) -> int:
        """The chosen clip's base-grid index (the declared upper bound with the noise off). Never fails."""
        if not noise:
            return self.encoding.clip_base
        return self.mechanism.release(aggregation.value_histogram(result), rng=rng)  # type: ignore[arg-type]

    def clipped(self, clip: int) -> ValueEncoding:
        """The encoding the answers read after the clip, with the bias its error bars assume."""
        return self.encoding.clipped(clip, self.mechanism.rows_above, self.mechanism.relative_excess)

    def released(self, clip: int) -> tuple[tuple[str, float, str], ...]:
        """The explanation's rows for the clip released: (column, clip, detail)."""
        return ((self.encoding.column, self.encoding.clipped(clip, 0.0, 0.0).high, "released: the values were clamped at it"),)

    def explain(self, see: str) -> tuple[str, float, str]:
        """(column, share of the budget, a short detail ending in ``see``) for EXPLAIN."""
        encoding = self.encoding
        budget = self.mechanism.privacy
        spent = f"ε {budget.epsilon:.3g}" if budget.is_laplace else f"ρ {budget.rho:.3g}"
        return (encoding.column, self.share,
                f"share of the budget: a private upper clip in [{encoding.low:g}, {encoding.high:g}] at {spent}, the one of least predicted "
                f"error: the plan's noise ({self.mechanism.slope:.3g} rows of clip width) against the clipped rows' excess; "
                f"bias estimate in the errors ({see})")


@dataclass(frozen=True)
class AutomaticBounds:
    """``bounds: auto``: one ``planner.MagnitudeClip`` per ``auto`` end (lower, upper; None for a declared end),
    sharing the clips' share of the statement's budget equally."""

    encoding: ValueEncoding
    mechanisms: tuple[planner.MagnitudeClip | None, planner.MagnitudeClip | None]
    share: float

    def spent(self) -> float:
        privacies = [m.privacy for m in self.mechanisms if m is not None]
        return float(sum(p.epsilon if p.is_laplace else p.rho for p in privacies))  # type: ignore[misc]

    def release(self, aggregation: BoundedAggregation, result: Mapping[str, np.ndarray], rng: object, noise: bool) -> tuple[float, float]:
        """The chosen ``(low, high)``: each ``auto`` end drawn from the rows per magnitude bin beyond the origin
        on its side (with the noise off, the most likely clip). Never fails."""
        histograms = aggregation.value_histogram(result)
        edges = planner.magnitude_edges()
        ends = [self.encoding.low, self.encoding.high]
        for side, (mechanism, sign) in enumerate(zip(self.mechanisms, (-1.0, 1.0))):
            if mechanism is not None:
                counts = histograms[1 - side]  # the lower end reads the bins below the origin
                chosen = mechanism.release(counts, rng=rng) if noise else mechanism.most_likely(counts)  # type: ignore[arg-type]
                ends[side] = self.encoding.origin + sign * float(edges[chosen])
        return ends[0], ends[1]

    def clipped(self, clip: tuple[float, float]) -> ValueEncoding:
        """The encoding the answers read: ``[low, high]`` the chosen ends, the bias their error bars assume
        (each end's rows beyond it, measured in the width ``high − low``: at least the two ends' together)."""
        used = [m for m in self.mechanisms if m is not None]
        return self.encoding.bounded(*clip, max(m.rows_above for m in used), used[0].relative_excess)

    def released(self, clip: tuple[float, float]) -> tuple[tuple[str, float, str], ...]:
        return tuple(
            (self.encoding.column, value, f"released: the values were clamped {where} at it")
            for value, where, mechanism in zip(clip, ("below", "above"), self.mechanisms) if mechanism is not None
        )

    def explain(self, see: str) -> tuple[str, float, str]:
        encoding = self.encoding
        ends = " and ".join(name for name, m in zip(("a lower", "an upper"), self.mechanisms) if m is not None)
        first = next(m for m in self.mechanisms if m is not None)
        each = " each" if all(self.mechanisms) else ""
        budget, per_doubling = first.privacy, first.rows_per_doubling
        spent = f"ε {budget.epsilon:.3g}" if budget.is_laplace else f"ρ {budget.rho:.3g}"
        return (encoding.column, self.share,
                f"share of the budget: bounds: auto — {ends} clip at {spent}{each}, on a geometric grid of distances from "
                f"{encoding.origin:g} from the values' spacing {encoding.resolution:g} to 2^53: a clip d doublings above it needs more than "
                f"d × {per_doubling:.0f} rows beyond the origin; bias estimate in the errors ({see})")


def share(encoding: ValueEncoding | None) -> float:
    """The share of the statement's budget its clips spend (0 when its schema asks for none), known before the
    plan: the plan measures with the rest."""
    if encoding is not None and any(encoding.auto_ends):
        return planner.CLIP_SHARE
    return planner.UPPER_CLIP_SHARE if encoding is not None and encoding.clip_base else 0.0


def noise_slope(batch: CompiledBatch, plan: planner.Plan) -> float:
    """``λ``: the noise the plan leaves on the column's sums, as their expected absolute error in rows of clip width
    (``√(2/π)·sd(U)`` summed over the groups of a grouping set, averaged over its sets). Public: the plan's."""
    encoding, workload = batch.encoding, batch.workload
    assert encoding is not None and workload is not None
    width = len(encoding.block())  # a clipped column is never read as SUM alone: row 1 of each group's block is U
    variances = plan.query_variances()
    holding = [i for i, p in enumerate(workload.products) if any(encoding.attribute in f.attributes for f in p.factors)]
    total = sum(float(np.sum(np.sqrt(np.asarray(variances[i]).reshape(-1, width)[:, 1]))) for i in holding)
    return math.sqrt(2 / math.pi) * total / batch.scale / max(1, len(holding))


def design(
    encoding: ValueEncoding | None, privacy: planner.Privacy, contributions: int, slope: float
) -> AutomaticClip | AutomaticBounds | None:
    """The clips of ``encoding``'s column when its schema says ``clip: auto`` or ``bounds: auto`` (None otherwise),
    spending :func:`share` of ``privacy``; ``slope`` the plan's :func:`noise_slope` (what ``clip: auto`` weighs)."""
    spent = share(encoding)
    if encoding is None or not spent:
        return None
    if any(encoding.auto_ends):
        each = privacy.scaled(spent / sum(encoding.auto_ends))
        mechanisms = tuple(planner.MagnitudeClip(each, contributions, encoding.resolution) if auto else None for auto in encoding.auto_ends)
        return AutomaticBounds(encoding, mechanisms, spent)  # type: ignore[arg-type]
    return AutomaticClip(encoding, UpperClip(encoding.clip_base, privacy.scaled(spent), max(slope, MIN_SLOPE), contributions), spent)
