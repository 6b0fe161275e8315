"""Local differential privacy: workload factorization mechanisms (MATH.md §8).

`optimize(W, ε)` finds a randomizer adapted to the workload; the classic protocols are available as
factorizations for comparison; `design`/`Mechanism`/`Aggregator` ship a randomizer to clients and
turn their reports into workload answers with variances.
"""

from planner.ldp.errors import (
    InvalidEpsilonError,
    InvalidStrategyError,
    LDPError,
    MechanismFormatError,
    WorkloadNotSupportedError,
)
from planner.ldp.deploy import Aggregator, ItemSetMechanism, Mechanism, TableMechanism, WorkloadAnswers, design
from planner.ldp.factorization import Factorization, optimal_reconstruction
from planner.ldp.optimize import optimize
from planner.ldp.protocols import (
    classic_protocols,
    fourier,
    hadamard_response,
    hierarchical,
    local_hashing,
    randomized_response,
    rappor,
    subset_selection,
    unary_encoding,
)

__all__ = [
    "Aggregator",
    "ItemSetMechanism",
    "Mechanism",
    "TableMechanism",
    "WorkloadAnswers",
    "design",
    "Factorization",
    "InvalidEpsilonError",
    "InvalidStrategyError",
    "LDPError",
    "MechanismFormatError",
    "WorkloadNotSupportedError",
    "classic_protocols",
    "fourier",
    "hadamard_response",
    "hierarchical",
    "local_hashing",
    "optimal_reconstruction",
    "optimize",
    "randomized_response",
    "rappor",
    "subset_selection",
    "unary_encoding",
]
