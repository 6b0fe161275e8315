"""planner: workload-aware measurement planning for differential privacy — pure numerics, no SQL.

This module is the planner's public API: ``dpsql`` imports from here (and from the ``planner.ldp``
subpackage) only, never from the modules behind it (tests/test_architecture.py)."""

from planner.balance import Balance, plan_balanced
from planner.clipping import CLIP_SHARE, LOWEST_OCTAVE, MANTISSA_BITS, OCTAVES, UPPER_CLIP_SHARE, MagnitudeClip, UpperClip, magnitude_bins, magnitude_edges, magnitudes
from planner.bound_choice import BoundChoice, bound_levels
from planner.composition import composition_shares
from planner.domain import Domain
from planner.privacy import Privacy
from planner.workload import AllRange, Block, Explicit, Factor, Identity, Predicate, Prefix, Product, ShiftedPrefix, Total, Workload, marginal_for
from planner.plan import Plan, identity_plan, plan
from planner.keyed_release import KeyedRelease
from planner.keyed_release import design as design_keyed_release
from planner.noise import NoiseParameterError
from planner.partition import PartitionSelection, PartitionSelectionImpossibleError
from planner.quantile_mechanisms import ExponentialQuantiles, QuantileChoice, QuantileColumn
from planner.quantile_mechanisms import choose as choose_quantiles
from planner.race_to_the_top import RaceToTheTop, TruncatedRelease
from planner.select import BoundUnavailableError
from planner.selected_intervals import selected_variances
from planner.selection_split import SelectionSplit, split
from planner.staged_selection import StagedSelection, StagedSplit
from planner.staged_selection import design as design_staged_selection
from planner.staged_selection import split as split_staged_selection
from planner.store import MeasurementStore
from planner.strategies.base import Answers, Measurement

__all__ = [
    "AllRange",
    "CLIP_SHARE",
    "LOWEST_OCTAVE",
    "MANTISSA_BITS",
    "OCTAVES",
    "UPPER_CLIP_SHARE",
    "Answers",
    "Balance",
    "Block",
    "BoundChoice",
    "BoundUnavailableError",
    "Domain",
    "Explicit",
    "ExponentialQuantiles",
    "Factor",
    "Identity",
    "KeyedRelease",
    "Measurement",
    "MeasurementStore",
    "NoiseParameterError",
    "PartitionSelection",
    "PartitionSelectionImpossibleError",
    "Plan",
    "Predicate",
    "Prefix",
    "Privacy",
    "Product",
    "QuantileChoice",
    "QuantileColumn",
    "RaceToTheTop",
    "SelectionSplit",
    "ShiftedPrefix",
    "StagedSelection",
    "StagedSplit",
    "Total",
    "UpperClip",
    "MagnitudeClip",
    "magnitude_bins",
    "magnitude_edges",
    "magnitudes",
    "TruncatedRelease",
    "Workload",
    "bound_levels",
    "design_keyed_release",
    "design_staged_selection",
    "choose_quantiles",
    "composition_shares",
    "identity_plan",
    "marginal_for",
    "plan",
    "plan_balanced",
    "selected_variances",
    "split",
    "split_staged_selection",
]
