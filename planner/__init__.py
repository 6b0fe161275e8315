"""planner: workload-aware measurement planning for differential privacy — pure numerics, no SQL.

This module is the planner's public API: ``dpsql`` imports from here (and from the ``planner.ldp``
subpackage) only, never from the modules behind it (tests/test_architecture.py)."""

from planner.bound_choice import BoundChoice
from planner.domain import Domain
from planner.privacy import Privacy
from planner.workload import AllRange, Block, Explicit, Factor, Identity, Predicate, Prefix, Product, Total, Workload, marginal_for
from planner.plan import Plan, identity_plan, plan
from planner.keyed_release import KeyedRelease
from planner.keyed_release import design as design_keyed_release
from planner.noise import NoiseParameterError, discrete_gaussian, discrete_laplace
from planner.partition import PartitionSelection, PartitionSelectionImpossibleError
from planner.race_to_the_top import RaceToTheTop, TruncatedRelease
from planner.recovery import helmert_basis, nonnegative_fit
from planner.select import BoundUnavailableError
from planner.selected_intervals import selected_errors
from planner.selection_split import SelectionSplit, split
from planner.store import MeasurementStore
from planner.strategies.base import Answers, Measurement
from planner.strategies.direct import row_norms2, row_norms2_over
from planner.strategies.residual import NonNegativityReport

__all__ = [
    "AllRange",
    "Answers",
    "Block",
    "BoundChoice",
    "BoundUnavailableError",
    "Domain",
    "Explicit",
    "Factor",
    "Identity",
    "KeyedRelease",
    "Measurement",
    "MeasurementStore",
    "NoiseParameterError",
    "NonNegativityReport",
    "PartitionSelection",
    "PartitionSelectionImpossibleError",
    "Plan",
    "Predicate",
    "Prefix",
    "Privacy",
    "Product",
    "RaceToTheTop",
    "SelectionSplit",
    "Total",
    "TruncatedRelease",
    "Workload",
    "design_keyed_release",
    "discrete_gaussian",
    "discrete_laplace",
    "helmert_basis",
    "identity_plan",
    "marginal_for",
    "nonnegative_fit",
    "plan",
    "row_norms2",
    "row_norms2_over",
    "selected_errors",
    "split",
]
