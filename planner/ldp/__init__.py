"""Local differential privacy: workload factorization mechanisms (docs/math.md §8).

`optimize(W, ε)` finds a randomizer adapted to the workload; the classic protocols are available as
factorizations for comparison; `design`/`Mechanism`/`Aggregator` ship a randomizer to clients and
turn their reports into workload answers with variances.

Example:
    >>> import numpy as np
    >>> from planner.ldp import optimize, classic_protocols
    >>> prefix = np.tril(np.ones((16, 16)))
    >>> best = optimize(prefix, 1.0, seed=0, restarts=1, iterations=100)
    >>> classic = min(p.worst_case_variance(1) for p in classic_protocols(prefix, 1.0).values())
    >>> best.worst_case_variance(1000) < 0.8 * 1000 * classic
    True
"""

from planner.ldp.deploy import Aggregator, ItemSetMechanism, Mechanism, Report, TableMechanism, WorkloadAnswers, design
from planner.ldp.errors import (
    InvalidEpsilonError,
    InvalidStrategyError,
    LDPError,
    MechanismFormatError,
    WorkloadNotSupportedError,
)
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
from planner.ldp.wnnls import non_negative_answers

__all__ = [
    "Report",
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
    "non_negative_answers",
    "local_hashing",
    "optimal_reconstruction",
    "optimize",
    "randomized_response",
    "rappor",
    "subset_selection",
    "unary_encoding",
]
