"""``clip: auto``: SUM/AVG/VARIANCE/STDDEV of a column clamp at a private clip within its declared bounds.

Prepare (:func:`design`): the batch's aggregated column has ``clip: auto`` in the schema. The statement's
budget is split before anything else is planned: ``planner.clipping.CLIP_SHARE`` for the clip (a
``planner.UpperClip`` over the column's base grid), the rest for the linear plan — one charge for both. The
moment cells keep their shape (``GRID`` steps of the clip's width, the same sensitivity for any clip), so the
plan is made before the clip is known.

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

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

import planner
from dpsql.sql.bounded import BoundedAggregation
from dpsql.sql.moments import ValueEncoding
from planner import UpperClip


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

    def value(self, clip: int) -> float:
        return self.encoding.clipped(clip, 0.0, 0.0).high

    def explain(self, see: str) -> tuple[str, float, str]:
        """(column, share of the budget, a short detail ending in ``see``) for EXPLAIN."""
        encoding = self.encoding
        budget = self.mechanism.privacy
        spent = f"ε {budget.epsilon:.3g}" if budget.is_laplace else f"ρ {budget.rho:.3g}"
        return (encoding.column, self.share,
                f"share of the budget: a private upper clip in [{encoding.low:g}, {encoding.high:g}] at {spent}; bias estimate in the errors ({see})")


def design(encoding: ValueEncoding | None, privacy: planner.Privacy, contributions: int) -> AutomaticClip | None:
    """The clip of ``encoding``'s column when its schema says ``clip: auto`` (None otherwise)."""
    if encoding is None or not encoding.clip_base:
        return None
    share = planner.CLIP_SHARE
    return AutomaticClip(encoding, UpperClip(encoding.clip_base, privacy.scaled(share), contributions), share)
