"""Exceptions a caller of `planner.ldp` can cause; each message says what to change."""


class LDPError(ValueError):
    """Base class of every user-facing error raised by `planner.ldp`."""


class InvalidEpsilonError(LDPError):
    """The privacy parameter is not a finite positive number."""


class InvalidStrategyError(LDPError):
    """A strategy matrix `Q` is not an ε-LDP randomizer (negative, columns not summing to 1, …)."""


class WorkloadNotSupportedError(LDPError):
    """The workload is malformed or not in the row space of the strategy, so no unbiased `V` exists."""


class MechanismFormatError(LDPError):
    """A serialized mechanism or a client report is malformed."""
