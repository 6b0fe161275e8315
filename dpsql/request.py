"""What flows through the statement pipeline (``dpsql.pipeline``): requests and prepared requests."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np

import planner
from dpsql.accountant import Cost
from dpsql.keys import KeyBounds, KeySet
from dpsql.post_processing import ShellPlan
from dpsql.session import Table
from dpsql.sql.clipping import AutomaticBounds, AutomaticClip
from dpsql.sql.quantile_paths import QuantilePaths
from dpsql.truncation import ChosenBound
from dpsql.sql.split import Shell
from dpsql.sql.statement import Statement
from dpsql.workloads import CompiledBatch
from planner import SelectionSplit


@dataclass(frozen=True)
class Output:
    """One statement as written: the result of the planned statement at ``first`` as it is (``shell`` None), or
    a public shell (``dpsql.sql.split``) run over the results of the ``count`` planned statements from ``first``."""

    shell: Shell | None
    first: int
    count: int = 1

    @property
    def cores(self) -> range:
        return range(self.first, self.first + self.count)


@dataclass(frozen=True)
class Request:
    """Statements to plan together (a shell's private cores among them), their weights, the cost asked for
    (None: no cost given, which only EXPLAIN accepts), whether to release non-negative answers or only explain,
    and the statements as written (``outputs``; empty: one per planned statement)."""

    statements: tuple[Statement, ...]
    weights: tuple[float, ...]
    cost: Cost | None
    non_negative: bool
    explain: bool = False
    selection_delta: float | None = None  # the most δ a key selection may spend (Google's OPTIONS(delta=…)); None: the connection's
    outputs: tuple[Output, ...] = ()

    @property
    def written(self) -> tuple[Output, ...]:
        """The statements as written: ``outputs``, or one per planned statement."""
        return self.outputs or tuple(Output(None, i) for i in range(len(self.statements)))

    @property
    def text(self) -> str:
        return "; ".join(o.shell.sql if o.shell is not None else self.statements[o.first].sql for o in self.written)


@dataclass(frozen=True)
class Selection:
    """Keys of ``column`` are selected by this statement (``dpsql.selection``): by thresholding the measured
    counts (``thresholded``), by a split of the budget between selection and counting (``split``), or — several
    columns — in stages (``staged``: each column's keys first, then one column over the others' released keys); with
    SUM/AVG/VARIANCE/STDDEV beside other columns without declared domain, by thresholding their rows' totals at a
    share of the budget, the rest measuring the statement over the released keys (``measured``)."""

    column: str
    bounds: KeyBounds
    split: SelectionSplit | None
    thresholded: object | None  # dpsql.selection.ThresholdedDesign
    staged: object | None = None  # dpsql.selection.StagedDesign
    measured: object | None = None  # dpsql.selection.MeasuredDesign


@dataclass(frozen=True)
class Decision:
    """What release measures: ``plan`` over the products ``measured`` (None: nothing), the products answered
    from kept measurements (``kept``), and the fresh plan's variances they were compared with."""

    plan: planner.Plan | None
    measured: tuple[int, ...]
    kept: tuple[int, ...]
    fresh: planner.Plan | None  # the plan of the whole workload at the requested cost
    kept_variances: Mapping[int, np.ndarray] = field(default_factory=dict)  # GLS variances of ``kept`` from what was kept
    kept_measurements: int = 0  # measurements kept on these rows when prepared


@dataclass(frozen=True)
class Prepared:
    """A request checked, compiled, planned and priced; nothing has been read or charged."""

    request: Request
    table: Table
    batch: CompiledBatch
    rows: Hashable  # the store's rows key: the table and the WHERE applied in SQL
    privacy: planner.Privacy | None  # what the statement's measurement spends (None: nothing to measure)
    keyed: str | None  # a column without declared domain whose cells key bounding decides
    selection: Selection | None  # keys selected by this statement
    decision: Decision
    cost: Cost  # what release charges when it reads
    cached_keys: int | None = None  # size of the released key set the statement uses (not selecting)
    quantile_paths: QuantilePaths | None = None  # quantiled columns an exponential mechanism answers (dpsql.sql.quantile_paths)
    clip: AutomaticClip | AutomaticBounds | None = None  # the aggregated column's private clips (``clip: auto``, ``bounds: auto``; dpsql.sql.clipping)
    balance: planner.Balance | None = None  # grouping sets held to their own shares' accuracy (planner.plan_balanced)
    shells: tuple[ShellPlan | None, ...] = ()  # per statement as written: its shell's cores and columns (None: no shell)
    chosen: ChosenBound | None = None  # the bound on rows per unit is chosen by the statement (``dpsql.truncation``)
    parts: tuple[Part, ...] = ()  # a composed request: its parts over different data vectors (``dpsql.sql.data_vectors``)
    joint: tuple[str, ...] = ()  # further columns without declared domain whose keys form tuples with ``keyed``'s
    public: tuple[tuple[str, KeySet], ...] = ()  # such columns with released key sets, public domains of a selecting statement

    @property
    def key_columns(self) -> tuple[str, ...]:
        """Every column without declared domain the statement uses: ``keyed``, then ``joint``."""
        return () if self.keyed is None else (self.keyed, *self.joint)

    @property
    def read_keys(self) -> tuple[str, ...]:
        """The columns whose values form the key the read bounds: :attr:`key_columns`, then the public ones."""
        return (*self.key_columns, *(c for c, _ in self.public))

    @property
    def plan(self) -> planner.Plan | None:
        """The plan release measures (None when it measures nothing)."""
        return self.decision.plan

    @property
    def contributions(self) -> int:
        return self.table.schema.contributions

    @property
    def reads(self) -> bool:
        """Whether release reads private rows (and so charges)."""
        if self.parts:
            return any(part.prepared.reads for part in self.parts)
        return self.batch.workload is not None and (self.selection is not None or self.decision.plan is not None)


@dataclass(frozen=True)
class Part:
    """One data vector of a composed request: its planned statements (indices into the request's), prepared on
    their own at ``share`` of the request's budget (``planner.composition_shares``)."""

    statements: tuple[int, ...]
    share: float
    prepared: Prepared
