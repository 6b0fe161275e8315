"""planner: workload-aware measurement planning for differential privacy — pure numerics, no SQL."""

from planner.domain import Domain
from planner.privacy import Privacy
from planner.workload import AllRange, Explicit, Factor, Identity, Predicate, Prefix, Product, Total, Workload

__all__ = [
    "AllRange",
    "Domain",
    "Explicit",
    "Factor",
    "Identity",
    "Predicate",
    "Prefix",
    "Privacy",
    "Product",
    "Total",
    "Workload",
]
