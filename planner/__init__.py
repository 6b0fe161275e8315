"""planner: workload-aware measurement planning for differential privacy — pure numerics, no SQL."""

from planner.domain import Domain
from planner.privacy import Privacy
from planner.workload import AllRange, Explicit, Factor, Identity, Predicate, Prefix, Product, Total, Workload
from planner.plan import Plan, identity_plan, plan

__all__ = [
    "AllRange",
    "Domain",
    "Explicit",
    "Factor",
    "Identity",
    "Plan",
    "Predicate",
    "Prefix",
    "Privacy",
    "Product",
    "Total",
    "Workload",
    "identity_plan",
    "plan",
]
